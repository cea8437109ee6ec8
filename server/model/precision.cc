#include "server/model/precision.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/model/engine_factory.h"

namespace kiln::server {

std::string BucketPrecision(const runtime::Engine& engine, const std::string& compiled_at) {
  if (compiled_at == "int8") return engine.info().int8_ops > 0 ? compiled_at : "float32";
  return engine.info().bf16_ops > 0 ? compiled_at : "float32";
}

std::string LowestPrecisionOn(const std::string& device, const PrecisionConfig& precision) {
  if (precision.int8 && PassesOffOn(device).count("fuse_qdq") == 0) return "int8";
  return LowerPrecisionOn(device);
}

std::string NextPrecision(const std::string& precision, const std::string& device) {
  if (precision == "int8") {
    const std::string lower = LowerPrecisionOn(device);
    return lower.empty() ? "float32" : lower;
  }
  return precision == "bf16" ? "bf16-mixed" : "float32";
}

void AddPrecisionNote(CheckSummary& check, const std::string& note) {
  absl::StrAppend(&check.precision_message, check.precision_message.empty() ? "" : "; ", note);
}

void StepUp(const std::string& device, const std::string& why, PipelineOptions& pipeline,
            CheckSummary& check) {
  const std::string next = NextPrecision(pipeline.precision, device);
  AddPrecisionNote(check, absl::StrCat(why, "; ", next));
  spdlog::warn("precision: {}", check.precision_message);
  pipeline.precision = next;
}

std::string PrecisionOf(const std::map<int64_t, std::string>& by_bucket) {
  // Precision -> its batch sizes, the lowest precision first (the ladder's order).
  auto rank = [](const std::string& p) {
    return p == "int8" ? 0 : p == "bf16" ? 1 : p == "bf16-mixed" ? 2 : 3;
  };
  auto lower = [&](const std::string& a, const std::string& b) {
    return rank(a) != rank(b) ? rank(a) < rank(b) : a < b;
  };
  std::map<std::string, std::vector<std::string>, decltype(lower)> buckets(lower);
  for (const auto& [batch, precision] : by_bucket) {
    buckets[precision].push_back(std::to_string(batch));
  }
  if (buckets.empty()) return "float32";
  if (buckets.size() == 1) return buckets.begin()->first;
  std::string out;
  for (const auto& [precision, batches] : buckets) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", precision, " (batch ",
                    absl::StrJoin(batches, ", "), ")");
  }
  return out;
}

check::Tolerance ToleranceOf(const ModelConfig& config, const PipelineOptions& pipeline) {
  if (pipeline.precision == "float32") return {config.warmup.rtol, config.warmup.atol, {}};
  // Element by element only a guard against a broken kernel (ten times the budget, at the
  // output's scale); the budget itself bounds each output's relative error (WithinBudget).
  const PrecisionConfig& p = config.precision;
  return {10 * p.max_rel_error, p.max_abs_error, {}};
}

void WithinBudget(const ModelConfig& config, const PipelineOptions& pipeline,
                  check::Divergence& d) {
  if (pipeline.precision == "float32" || !d.ok) return;
  if (d.norm_rel_err <= config.precision.max_rel_error) return;
  d.ok = false;
  d.message = absl::StrFormat("relative error %.3g over the budget's %.3g", d.norm_rel_err,
                              config.precision.max_rel_error);
}

void FallBack(int64_t batch, const check::Divergence& d, const std::string& device,
              PipelineOptions& pipeline, CheckSummary& check) {
  StepUp(device,
         absl::StrFormat("%s exceeded the budget on batch %d (relative error %.3g, "
                         "max_abs_err %.3g: %s)",
                         pipeline.precision, batch, d.norm_rel_err, d.max_abs_err, d.message),
         pipeline, check);
}

std::string PrecisionKey(const ModelConfig& config, const PipelineOptions& pipeline) {
  if (pipeline.precision == "float32") return "float32";
  return absl::StrCat(pipeline.precision, ",", config.precision.max_abs_error, ",",
                      config.precision.max_rel_error);
}

}  // namespace kiln::server
