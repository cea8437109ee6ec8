// The load loop: threads each driving async calls on their own CompletionQueue.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "loadtest/options.h"
#include "loadtest/requests.h"

namespace kiln::load {

// What one phase measured. Latencies are of every call, failed ones included (as ghz does).
struct RunResult {
  std::vector<int64_t> latencies_ns;
  std::map<int, int64_t> codes;                // grpc::StatusCode -> calls
  std::map<std::string, int64_t> errors;       // ghz's "rpc error: code = .. desc = .." -> calls
  std::chrono::nanoseconds total{0};           // first send (or schedule) to last answer
};

// The name Go's grpc gives a status code ("OK", "DeadlineExceeded", ...), as ghz prints it.
const char* GoCodeName(int code);

// Runs `total` calls (or for `duration`) per the options: closed loop at `concurrency`, or
// open loop at `rps` when it is set. Warm-up is the caller's business (it runs a phase too).
RunResult RunPhase(const Options& options, int64_t total, std::chrono::nanoseconds duration,
                   const RequestPool& pool);

}  // namespace kiln::load
