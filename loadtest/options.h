// kiln-load's command line: what to call, how hard, for how long.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::load {

struct Options {
  std::string target = "127.0.0.1:8500";
  std::string call = "predict";  // predict | batch_predict | generate
  std::string protocol = "kiln";  // kiln (kiln.v1 Predict) | v2 (KServe v2 ModelInfer)
  std::string data_file;         // a PredictRequest (or BatchPredictRequest) in JSON
  std::string model;             // random inputs from GetModel (or overrides the file's model)
  std::string json_file;         // ghz-compatible report
  int concurrency = 1;           // closed loop: calls in flight; open loop: the in-flight cap
  int64_t total = 0;             // -n: requests after warm-up (0: run for `duration`)
  std::chrono::nanoseconds duration{0};  // -z
  double rps = 0;                // > 0: open loop at this fixed rate
  int64_t warmup = 0;
  int threads = 1;               // client threads, each with its own CompletionQueue and channel
  int samples = 1;               // BatchPredict: samples per call
  std::chrono::milliseconds timeout{20000};  // per-call deadline
  std::chrono::seconds wait_ready{0};        // poll GetModel until READY for this long
  std::vector<int64_t> prompt_lens{32};      // generate: prompt lengths, cycled
  int64_t max_tokens = 64;                   // generate: new tokens per request
};

// Parses "10s", "250ms", "2m", "1.5s", "100us" or a bare number of seconds.
absl::StatusOr<std::chrono::nanoseconds> ParseDuration(const std::string& text);

// argv without the program name. Returns the options or a message naming the bad flag.
absl::StatusOr<Options> ParseOptions(const std::vector<std::string>& args);

extern const char kUsage[];

}  // namespace kiln::load
