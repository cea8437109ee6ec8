#include "server/precision.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::server {

std::string PrecisionOf(const std::map<int64_t, std::vector<std::unique_ptr<runtime::Engine>>>& engines) {
  size_t lowered = 0;
  for (const auto& [batch, list] : engines) lowered += !list.empty() && list[0]->info().bf16_ops > 0;
  if (lowered == 0) return "float32";
  return lowered == engines.size() ? "bf16" : "bf16 and float32 (by batch bucket)";
}

check::Tolerance ToleranceOf(const ModelConfig& config, const PipelineOptions& pipeline) {
  if (pipeline.precision == "float32") return {config.warmup.rtol, config.warmup.atol, {}};
  return {config.precision.max_rel_error, config.precision.max_abs_error, {}};
}

void FallBackToFloat32(int64_t batch, const check::Divergence& d, PipelineOptions& pipeline,
                       CheckSummary& check) {
  check.precision_message = absl::StrFormat(
      "%s exceeded the budget on batch %d (max_abs_err %.3g, max_rel_err %.3g: %s); float32",
      pipeline.precision, batch, d.max_abs_err, d.max_rel_err, d.message);
  spdlog::warn("precision: {}", check.precision_message);
  pipeline.precision = "float32";
}

std::string PrecisionKey(const ModelConfig& config, const PipelineOptions& pipeline) {
  if (pipeline.precision == "float32") return "float32";
  return absl::StrCat(pipeline.precision, ",", config.precision.max_abs_error, ",",
                      config.precision.max_rel_error);
}

}  // namespace kiln::server
