#include "runtime/check/calibrate.h"

#include <cmath>
#include <limits>

#include "ops/run_observed.h"

namespace kiln::check {
namespace {

void Widen(const Tensor& t, passes::ValueRange& r) {
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (!std::isfinite(p[i])) {
      r.lo = -std::numeric_limits<float>::infinity();
      r.hi = std::numeric_limits<float>::infinity();
      return;
    }
    r.lo = std::min(r.lo, p[i]);
    r.hi = std::max(r.hi, p[i]);
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<const passes::Calibration>> Calibrate(
    const Graph& graph, const std::vector<const ref::TensorMap*>& feeds) {
  auto ranges = std::make_shared<passes::Calibration>();
  for (const ref::TensorMap* feed : feeds) {
    if (!feed || feed->empty()) continue;
    auto observe = [&](const Value& v, const Tensor& t) {
      if (t.dtype() != DType::kFloat32 || t.numel() == 0) return;
      auto [it, fresh] = ranges->try_emplace(v.name);
      if (fresh) {
        it->second.lo = std::numeric_limits<float>::max();
        it->second.hi = std::numeric_limits<float>::lowest();
      }
      Widen(t, it->second);
    };
    RETURN_IF_ERROR(ref::RunObserved(graph, *feed, observe).status());
  }
  if (ranges->empty()) return absl::FailedPreconditionError("no float32 values to calibrate");
  return std::shared_ptr<const passes::Calibration>(std::move(ranges));
}

}  // namespace kiln::check
