#include "server/model/precision_speed.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/compile.h"
#include "server/model/bucket_engines.h"

namespace kiln::server {
namespace {

std::vector<Tensor> ZerosFor(const runtime::Engine& engine) {
  std::vector<Tensor> inputs;
  for (const runtime::TensorSpec& s : engine.inputs()) inputs.emplace_back(s.dtype, s.shape);
  return inputs;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

absl::StatusOr<SpeedComparison> CompareSpeed(runtime::Engine& lowered, runtime::Engine& float32,
                                             int runs) {
  const std::vector<Tensor> inputs = ZerosFor(lowered);
  std::vector<Tensor> out_lowered, out_float32;
  std::vector<double> t_lowered, t_float32;
  auto time = [&](runtime::Engine& e, std::vector<Tensor>& outs,
                  std::vector<double>& into) -> absl::Status {
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(e.Run(inputs, outs));
    into.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    return absl::OkStatus();
  };
  // One untimed run each (first-touch pages, lazily created primitives), then alternating so
  // that a drift of the machine hits both alike.
  RETURN_IF_ERROR(lowered.Run(inputs, out_lowered));
  RETURN_IF_ERROR(float32.Run(inputs, out_float32));
  for (int i = 0; i < runs; ++i) {
    RETURN_IF_ERROR(time(lowered, out_lowered, t_lowered));
    RETURN_IF_ERROR(time(float32, out_float32, t_float32));
  }
  SpeedComparison c;
  c.lowered_ms = Median(t_lowered);
  c.float32_ms = Median(t_float32);
  c.keep_lowered = c.lowered_ms <= (1 - kLowerPrecisionMinGain) * c.float32_ms;
  return c;
}

bool ShouldCompareSpeed(const ModelConfig& config, const PipelineOptions& pipeline,
                        const runtime::Engine& engine) {
  return config.precision.mode == "auto" && config.precision.prefer == "fastest" &&
         pipeline.precision != "float32" && engine.info().bf16_ops > 0;
}

absl::StatusOr<bool> Float32IsFaster(const Graph& imported, int64_t batch,
                                     const ModelConfig& config, const PipelineOptions& pipeline,
                                     runtime::Engine& lowered, CheckSummary& check) {
  CompileOptions options;
  options.batch = batch;
  options.pipeline = pipeline;
  options.pipeline.precision = "float32";
  options.allow_dynamic_shapes = true;
  ASSIGN_OR_RETURN(CompiledGraph compiled, CompileGraph(imported, options));
  ASSIGN_OR_RETURN(auto exact, FirstEngine(config, config.cpu_layout, compiled));
  ASSIGN_OR_RETURN(SpeedComparison c, CompareSpeed(lowered, *exact));
  const std::string verdict = absl::StrFormat(
      "%s %.3g ms vs float32 %.3g ms at batch %d: %s", pipeline.precision, c.lowered_ms,
      c.float32_ms, batch,
      c.keep_lowered ? pipeline.precision
                     : absl::StrFormat("float32 (the lower precision must save %.0f%%)",
                                       100 * kLowerPrecisionMinGain));
  absl::StrAppend(&check.precision_message, check.precision_message.empty() ? "" : "; ", verdict);
  spdlog::info("precision: {}", verdict);
  return !c.keep_lowered;
}

}  // namespace kiln::server
