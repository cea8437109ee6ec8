// `precision: {mode: auto, prefer: fastest}`: a lowered engine that passed its budget is
// served only when it is also faster. The first bucket's lowered engine is timed against a
// float32 engine of the same bucket, built here for the comparison; equal speed keeps the
// exact arithmetic.
#pragma once

#include <string>

#include "base/status.h"
#include "compiler/pipeline.h"
#include "ir/graph.h"
#include "runtime/engine.h"
#include "server/model/model_builder.h"
#include "server/model/model_config.h"

namespace kiln::server {

struct SpeedComparison {
  double lowered_ms = 0, float32_ms = 0;  // median of the interleaved runs
  bool keep_lowered = true;
};

// The lower precision must save at least this share of the float32 time to be served.
inline constexpr double kLowerPrecisionMinGain = 0.05;

// Runs `lowered` and `float32` alternately `runs` times each on zeros of their inputs (same
// specs) and compares their medians.
absl::StatusOr<SpeedComparison> CompareSpeed(runtime::Engine& lowered, runtime::Engine& float32,
                                             int runs = 7);

// Whether the model's build should time its first bucket: auto precision preferring the
// fastest, a lowered compile, an engine that has bf16 products (from the cache too, so a
// restart decides as the first load did).
bool ShouldCompareSpeed(const ModelConfig& config, const PipelineOptions& pipeline,
                        const runtime::Engine& engine);

// Compiles and builds `imported` at `batch` in float32 (the pipeline's passes otherwise) and
// compares it with `lowered`; says the verdict in check.precision_message. True when float32
// should be served instead.
absl::StatusOr<bool> Float32IsFaster(const Graph& imported, int64_t batch,
                                     const ModelConfig& config, const PipelineOptions& pipeline,
                                     runtime::Engine& lowered, CheckSummary& check);

}  // namespace kiln::server
