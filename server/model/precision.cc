#include "server/model/precision.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/model/engine_factory.h"

namespace kiln::server {

std::string BucketPrecision(const runtime::Engine& engine, const std::string& compiled_at) {
  if (passes::IsInt8Precision(compiled_at)) {
    return engine.info().int8_ops > 0 ? compiled_at : "float32";
  }
  return engine.info().bf16_ops > 0 ? compiled_at : "float32";
}

std::string LowestPrecisionOn(const std::string& device, const PrecisionConfig& precision) {
  if (precision.int8 && PassesOffOn(device).count("fuse_qdq") == 0) return "int8";
  return LowerPrecisionOn(device);
}

std::string NextPrecision(const std::string& precision, const std::string& device) {
  if (passes::IsInt8Precision(precision)) {
    const std::string lower = LowerPrecisionOn(device);
    return lower.empty() ? "float32" : lower;
  }
  return precision == "bf16" ? "bf16-mixed" : "float32";
}

void AddPrecisionNote(CheckSummary& check, const std::string& note) {
  absl::StrAppend(&check.precision_message, check.precision_message.empty() ? "" : "; ", note);
}

namespace {

// This and every later bucket compile at `next`, the message saying `why` and then `step`
// (what `next` is).
void StepTo(const std::string& next, const std::string& why, const std::string& step,
            PipelineOptions& pipeline, CheckSummary& check) {
  AddPrecisionNote(check, absl::StrCat(why, "; ", step));
  spdlog::warn("precision: {}", check.precision_message);
  pipeline.precision = next;
}

}  // namespace

void StepUp(const std::string& device, const std::string& why, PipelineOptions& pipeline,
            CheckSummary& check) {
  const std::string next = NextPrecision(pipeline.precision, device);
  StepTo(next, why, next, pipeline, check);
}

std::string PrecisionOf(const std::map<int64_t, std::string>& by_bucket) {
  // Precision -> its batch sizes, the lowest precision first (the ladder's order).
  auto rank = [](const std::string& p) {
    return p == "int8" ? 0 : p == "int8-mixed" ? 1 : p == "bf16" ? 2 : p == "bf16-mixed" ? 3 : 4;
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

double Int8NoiseToKeep(double measured, double budget) {
  if (!(measured > 0) || !std::isfinite(measured)) return 0;
  const double kept = std::pow(kInt8MixedMargin * budget / measured, 2);
  return kept >= kMinInt8NoiseKept ? std::min(kept, 0.5) : 0;
}

void FallBack(int64_t batch, const check::Divergence& d, const ModelConfig& config,
              PipelineOptions& pipeline, CheckSummary& check) {
  const std::string what = absl::StrFormat(
      "%s exceeded the budget on batch %d (relative error %.3g, "
      "max_abs_err %.3g: %s)",
      pipeline.precision, batch, d.norm_rel_err, d.max_abs_err, d.message);
  const double kept = Int8NoiseToKeep(d.norm_rel_err, config.precision.max_rel_error);
  if (pipeline.precision != "int8" || kept <= 0) {
    StepUp(config.device, what, pipeline, check);
    return;
  }
  pipeline.int8_noise_kept = kept;
  StepTo("int8-mixed", what,
         absl::StrFormat("int8-mixed: the products whose rounding the outputs feel most in "
                         "float, %.3g of the estimated noise kept",
                         kept),
         pipeline, check);
}

std::string PrecisionKey(const ModelConfig& config, const PipelineOptions& pipeline) {
  if (pipeline.precision == "float32") return "float32";
  return absl::StrCat(
      pipeline.precision, ",", config.precision.max_abs_error, ",", config.precision.max_rel_error,
      pipeline.precision == "int8-mixed" ? absl::StrCat(",", pipeline.int8_noise_kept)
                                         : std::string());
}

}  // namespace kiln::server
