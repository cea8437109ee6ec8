#include "server/model/precision_verdict.h"

#include <spdlog/spdlog.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/json.h"
#include "compiler/passes/assign_precision.h"
#include "compiler/passes/quantize_int8.h"

namespace kiln::server {

EngineCacheKey VerdictKeyFor(const CacheContext& cache, const ModelConfig& config,
                             const PipelineOptions& start, int64_t batch) {
  EngineCacheKey key = CacheKeyFor(cache, config, start, batch);
  // Not an engine's key: the record answers what the ladder from `start` settled on.
  absl::StrAppend(&key.options, ";verdict=ladder from ", start.precision,
                  ",prefer:", config.precision.prefer);
  return key;
}

namespace {

void WriteCalibration(const passes::Calibration& ranges, json::Writer& w) {
  w.Key("calibration").BeginObject();
  for (const auto& [name, r] : ranges) {
    w.Key(name).BeginArray().Float(r.lo).Float(r.hi).Double(r.mean_sq).EndArray();
  }
  w.EndObject();
}

// null when absent; an error when present but not [lo, hi, mean_sq] numbers.
absl::StatusOr<std::shared_ptr<const passes::Calibration>> ReadCalibration(const json::Value* v) {
  if (!v) return nullptr;
  auto ranges = std::make_shared<passes::Calibration>();
  for (const auto& [name, item] : v->members()) {
    if (!item.is_array() || item.items().size() != 3) {
      return absl::DataLossError("a calibration range is not [lo, hi, mean_sq]");
    }
    passes::ValueRange& r = (*ranges)[name];
    ASSIGN_OR_RETURN(const double lo, json::AsDouble(item.items()[0], "lo"));
    ASSIGN_OR_RETURN(const double hi, json::AsDouble(item.items()[1], "hi"));
    ASSIGN_OR_RETURN(r.mean_sq, json::AsDouble(item.items()[2], "mean_sq"));
    r.lo = static_cast<float>(lo);
    r.hi = static_cast<float>(hi);
  }
  return std::shared_ptr<const passes::Calibration>(std::move(ranges));
}

}  // namespace

std::optional<PrecisionVerdict> LookupVerdict(const CacheContext& cache,
                                              const EngineCacheKey& key) {
  if (!cache.cache) return std::nullopt;
  std::shared_ptr<const EngineCacheEntry> e = cache.cache->Lookup(key);
  if (!e) return std::nullopt;
  absl::StatusOr<json::Value> doc = json::Parse(e->report_json);
  const json::Value* p = doc.ok() ? doc->Find("precision") : nullptr;
  const json::Value* kept = doc.ok() ? doc->Find("int8_noise_kept") : nullptr;
  const absl::StatusOr<double> share =
      kept ? json::AsDouble(*kept, "int8_noise_kept") : absl::StatusOr<double>(0.0);
  PrecisionVerdict v;
  v.precision = p ? p->text() : "";
  v.int8_noise_kept = share.value_or(0);
  v.message = e->check_message;
  absl::StatusOr<std::shared_ptr<const passes::Calibration>> calibration =
      ReadCalibration(doc.ok() ? doc->Find("calibration") : nullptr);
  if (calibration.ok()) v.calibration = *std::move(calibration);
  const bool known = v.precision == "float32" || passes::IsLowerPrecision(v.precision) ||
                     passes::IsInt8Precision(v.precision);
  if (!known || !(v.int8_noise_kept > 0 && v.int8_noise_kept <= 1) || !calibration.ok()) {
    spdlog::warn("engine cache: a precision verdict that does not parse; climbing the ladder");
    cache.cache->Invalidate(key);
    return std::nullopt;
  }
  return v;
}

void StoreVerdict(const CacheContext& cache, const EngineCacheKey& key, const PrecisionVerdict& v) {
  if (!cache.cache) return;
  EngineCacheEntry e;
  json::Writer w;
  w.BeginObject();
  w.Field("precision", v.precision);
  w.Field("int8_noise_kept", v.int8_noise_kept);
  if (v.calibration) WriteCalibration(*v.calibration, w);
  w.EndObject();
  e.report_json = w.Take();
  e.check_message = v.message;
  absl::Status s = cache.cache->Store(key, std::move(e));
  if (!s.ok()) spdlog::warn("{}", std::string(s.message()));
}

}  // namespace kiln::server
