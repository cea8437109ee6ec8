// kiln-load --call generate: streams of kiln.v1.GenerationService/Generate, each timed per
// token: time to first token (send to the first message) and inter-token latency (the gap
// between messages over the tokens each carries), beside ghz's per-call figures.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/status.h"
#include "loadtest/driver.h"
#include "loadtest/options.h"

namespace kiln::load {

struct GenerationResult {
  RunResult run;                 // per call, as ghz counts them
  std::vector<int64_t> ttft_ns;  // successful calls
  std::vector<int64_t> itl_ns;   // every gap between tokens of successful calls
  int64_t tokens = 0;            // generated, successful calls
};

// Closed loop at `concurrency` streams (one client thread each): `total` calls, or calls until
// `duration` passes. Prompts cycle through options.prompt_lens, their ids drawn below the
// model's vocabulary (from GetModel's logits); each asks for options.max_tokens, ignoring EOS.
absl::StatusOr<GenerationResult> RunGeneration(const Options& options, int64_t total,
                                               std::chrono::nanoseconds duration,
                                               const std::shared_ptr<grpc::Channel>& channel);

// The text report's generation lines (tokens/s, TTFT and inter-token percentiles) and the
// "generation" object kiln-load adds to ghz's JSON report. Precondition: sorted (Finalize).
std::string GenerationText(const GenerationResult& r);
std::string GenerationJson(const GenerationResult& r);
void WriteGeneration(json::Writer& w, const GenerationResult& r);
void FinalizeGeneration(GenerationResult& r);

}  // namespace kiln::load
