#include "server/model/precision_speed.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/compile.h"
#include "server/model/bucket_engines.h"
#include "server/model/engine_factory.h"
#include "server/model/precision.h"

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

absl::StatusOr<SpeedComparison> CompareSpeed(runtime::Engine& lowered, runtime::Engine& rival,
                                             int runs) {
  const std::vector<Tensor> inputs = ZerosFor(lowered);
  std::vector<Tensor> out_lowered, out_rival;
  std::vector<double> t_lowered, t_rival;
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
  RETURN_IF_ERROR(rival.Run(inputs, out_rival));
  for (int i = 0; i < runs; ++i) {
    RETURN_IF_ERROR(time(lowered, out_lowered, t_lowered));
    RETURN_IF_ERROR(time(rival, out_rival, t_rival));
  }
  SpeedComparison c;
  c.lowered_ms = Median(t_lowered);
  c.rival_ms = Median(t_rival);
  c.keep_lowered = c.lowered_ms <= (1 - kLowerPrecisionMinGain) * c.rival_ms;
  return c;
}

bool ShouldCompareSpeed(const ModelConfig& config, const PipelineOptions& pipeline,
                        const runtime::Engine& engine) {
  if (config.precision.mode != "auto" || config.precision.prefer != "fastest") return false;
  // Only an engine with products in its lowered precision (BucketPrecision says float32
  // for one without, and for a float32 compile).
  return BucketPrecision(engine, pipeline.precision) != "float32";
}

std::vector<std::string> RivalsOf(const std::string& precision, const std::string& device) {
  const std::string lower = LowerPrecisionOn(device);
  if (passes::IsInt8Precision(precision) && !lower.empty()) return {lower, "float32"};
  return {"float32"};
}

absl::StatusOr<std::string> FasterRival(const Graph& imported, int64_t batch,
                                        const ModelConfig& config, const PipelineOptions& pipeline,
                                        const std::vector<std::string>& rivals,
                                        runtime::Engine& lowered, CheckSummary& check) {
  std::string winner;
  double winner_ms = 0;
  for (const std::string& rival : rivals) {
    CompileOptions options;
    options.batch = batch;
    options.pipeline = pipeline;
    options.pipeline.precision = rival;
    options.allow_dynamic_shapes = true;
    ASSIGN_OR_RETURN(CompiledGraph compiled, CompileGraph(imported, options));
    ASSIGN_OR_RETURN(auto engine, FirstEngine(config, config.cpu_layout, compiled));
    ASSIGN_OR_RETURN(SpeedComparison c, CompareSpeed(lowered, *engine));
    const std::string verdict = absl::StrFormat(
        "%s %.3g ms vs %s %.3g ms at batch %d: %s", pipeline.precision, c.lowered_ms, rival,
        c.rival_ms, batch,
        c.keep_lowered ? pipeline.precision
                       : absl::StrFormat("%s (the lower precision must save %.0f%%)", rival,
                                         100 * kLowerPrecisionMinGain));
    AddPrecisionNote(check, verdict);
    spdlog::info("precision: {}", verdict);
    if (!c.keep_lowered && (winner.empty() || c.rival_ms < winner_ms)) {
      winner = rival;
      winner_ms = c.rival_ms;
    }
  }
  return winner;
}

}  // namespace kiln::server
