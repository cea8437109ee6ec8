// What GET /metrics serves: the process-wide kiln_* families (server/metrics/kiln_metrics.h)
// and the gauges computed from the model registry at scrape time (model states, engine
// arenas, memory, generation sequences and kv pages), so they never drift on unload.
#pragma once

#include <string>

#include "server/serving/model_registry.h"

namespace kiln::server::metrics {

// The text exposition (metrics::kContentType) of every family, scrape-time gauges last.
std::string RenderAll(const ModelRegistry& registry);

}  // namespace kiln::server::metrics
