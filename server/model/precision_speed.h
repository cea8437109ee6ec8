// `precision: {mode: auto, prefer: fastest}`: a lowered engine that passed its budget is
// served only when it is also faster. The first bucket's lowered engine is timed against its
// rivals' engines of the same bucket (float32; for int8 also bf16), built here for the
// comparison; equal speed keeps the higher precision.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/pipeline.h"
#include "ir/graph.h"
#include "runtime/engine.h"
#include "server/model/model_builder.h"
#include "server/model/model_config.h"

namespace kiln::server {

struct SpeedComparison {
  double lowered_ms = 0, rival_ms = 0;  // medians of the interleaved runs
  bool keep_lowered = true;
};

// The lower precision must save at least this share of its rival's time to be served.
inline constexpr double kLowerPrecisionMinGain = 0.05;

// Runs `lowered` and `rival` alternately `runs` times each on zeros of their inputs (same
// specs) and compares their medians.
absl::StatusOr<SpeedComparison> CompareSpeed(runtime::Engine& lowered, runtime::Engine& rival,
                                             int runs = 7);

// Whether the model's build should time its first bucket: auto precision preferring the
// fastest, a lowered compile, an engine with products in that precision (from the cache too,
// so a restart decides as the first load did).
bool ShouldCompareSpeed(const ModelConfig& config, const PipelineOptions& pipeline,
                        const runtime::Engine& engine);

// What a lowered engine must beat to be served: float32, and for int8 also the device's
// lower float precision (bf16).
std::vector<std::string> RivalsOf(const std::string& precision, const std::string& device);

// Compiles and builds `imported` at `batch` at each of `rivals` (the pipeline's passes
// otherwise; unchecked, for the timing only) and compares each with `lowered`; says the
// verdicts in check.precision_message. The fastest rival that `lowered` does not beat by
// kLowerPrecisionMinGain, or "" when it beats them all.
absl::StatusOr<std::string> FasterRival(const Graph& imported, int64_t batch,
                                        const ModelConfig& config, const PipelineOptions& pipeline,
                                        const std::vector<std::string>& rivals,
                                        runtime::Engine& lowered, CheckSummary& check);

}  // namespace kiln::server
