#include "runtime/check/calibrate.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "ops/run_observed.h"

namespace kiln::check {
namespace {

// Widens r by t's values and adds their squares to `sum_sq` (the mean square over every feed).
void Widen(const Tensor& t, passes::ValueRange& r, double& sum_sq) {
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (!std::isfinite(p[i])) {
      r.lo = -std::numeric_limits<float>::infinity();
      r.hi = std::numeric_limits<float>::infinity();
      return;
    }
    r.lo = std::min(r.lo, p[i]);
    r.hi = std::max(r.hi, p[i]);
    sum_sq += double{p[i]} * p[i];
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<const passes::Calibration>> Calibrate(
    const Graph& graph, const std::vector<const ref::TensorMap*>& feeds,
    std::vector<ref::TensorMap>* outputs) {
  if (outputs) outputs->assign(feeds.size(), {});
  auto ranges = std::make_shared<passes::Calibration>();
  std::map<std::string, std::pair<double, int64_t>> squares;  // name -> (sum of squares, count)
  for (size_t f = 0; f < feeds.size(); ++f) {
    const ref::TensorMap* feed = feeds[f];
    if (!feed || feed->empty()) continue;
    auto observe = [&](const Value& v, const Tensor& t) {
      if (t.dtype() != DType::kFloat32 || t.numel() == 0) return;
      auto [it, fresh] = ranges->try_emplace(v.name);
      if (fresh) {
        it->second.lo = std::numeric_limits<float>::max();
        it->second.hi = std::numeric_limits<float>::lowest();
      }
      auto& [sum_sq, count] = squares[v.name];
      Widen(t, it->second, sum_sq);
      count += t.numel();
    };
    ASSIGN_OR_RETURN(ref::TensorMap answer, ref::RunObserved(graph, *feed, observe));
    if (outputs) (*outputs)[f] = std::move(answer);
  }
  for (auto& [name, range] : *ranges) {
    const auto& [sum_sq, count] = squares[name];
    if (count > 0 && std::isfinite(range.hi - range.lo)) range.mean_sq = sum_sq / count;
  }
  if (ranges->empty()) return absl::FailedPreconditionError("no float32 values to calibrate");
  return std::shared_ptr<const passes::Calibration>(std::move(ranges));
}

}  // namespace kiln::check
