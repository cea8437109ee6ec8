// kilnd's `log.json` lines: one JSON object per line with time, level, thread and message.
#pragma once

#include <spdlog/formatter.h>

#include <memory>

namespace kiln::server {

// {"time":"2026-12-02T17:00:00.000+0000","level":"info","thread":123,"msg":"..."}; the
// message is a JSON string literal (quotes, backslashes and control characters escaped), so
// a line stays one object whatever a model name or a client's text holds.
std::unique_ptr<spdlog::formatter> JsonLineFormatter();

}  // namespace kiln::server
