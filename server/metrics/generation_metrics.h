// The generation loop's metrics (server/generate/): time to first token and between tokens,
// tokens generated and preemptions, per model. The running/waiting sequences and the kv
// cache's pages are scrape-time gauges (kiln_metrics.cc), read from each loop when served.
#pragma once

#include <string>

#include "server/generate/generator.h"

namespace kiln::server::metrics {

// kiln_generation_time_to_first_token_seconds, kiln_generation_inter_token_seconds,
// kiln_generation_tokens_total and kiln_generation_preemptions_total for `model`.
generate::GenerationHooks GenerationHooksFor(const std::string& model);

}  // namespace kiln::server::metrics
