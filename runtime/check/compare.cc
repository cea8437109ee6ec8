#include "runtime/check/compare.h"

#include <cmath>
#include <sstream>

namespace kiln::check {

Divergence CompareTensors(const Tensor& actual, const Tensor& expected, const Tolerance& tol) {
  const double rtol = tol.rtol, atol = tol.atol;
  Divergence c;
  if (actual.dtype() != expected.dtype()) {
    c.ok = false;
    c.message = "dtype " + DTypeName(actual.dtype()) + ", expected " + DTypeName(expected.dtype());
    return c;
  }
  if (actual.shape() != expected.shape()) {
    c.ok = false;
    c.message = "shape " + ShapeToString(actual.shape()) + ", expected " +
                ShapeToString(expected.shape());
    return c;
  }
  // Integers and bools must match exactly (a tolerance scaled by |expected| would accept
  // wrong indices); 64-bit values are compared as integers, not through double.
  // float8/float4/e8m0 compare as floats through GetDouble; int4/int2 exactly, like integers.
  const bool exact = !IsFloatDType(expected.dtype()) && !IsNarrowFloatDType(expected.dtype());
  int64_t worst = -1;
  double worst_excess = 0.0;
  double diff_sq = 0.0, ref_sq = 0.0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    double a = actual.GetDouble(i), e = expected.GetDouble(i);
    if (exact) {
      if (actual.GetUInt(i) == expected.GetUInt(i)) continue;
      c.ok = false;
      c.max_abs_err = std::max(c.max_abs_err, std::fabs(a - e));
      if (worst < 0) worst = i;
      continue;
    }
    if (std::isnan(a) || std::isnan(e)) {
      if (std::isnan(a) && std::isnan(e)) continue;
      c.ok = false;
      worst = i;
      worst_excess = INFINITY;
      continue;
    }
    if (std::isinf(a) || std::isinf(e)) {
      if (a == e) continue;
      c.ok = false;
      worst = i;
      worst_excess = INFINITY;
      continue;
    }
    double abs_err = std::fabs(a - e);
    diff_sq += abs_err * abs_err;
    ref_sq += e * e;
    c.max_abs_err = std::max(c.max_abs_err, abs_err);
    if (e != 0.0) c.max_rel_err = std::max(c.max_rel_err, abs_err / std::fabs(e));
    double excess = abs_err - (atol + rtol * std::fabs(e));
    if (excess > 0) {
      c.ok = false;
      if (excess > worst_excess || worst < 0) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  if (diff_sq > 0) c.norm_rel_err = ref_sq > 0 ? std::sqrt(diff_sq / ref_sq) : INFINITY;
  if (!c.ok) {
    std::ostringstream os;
    os.precision(9);
    os << "element " << worst << ": got " << actual.GetDouble(worst) << ", expected "
       << expected.GetDouble(worst);
    c.message = os.str();
  }
  return c;
}

}  // namespace kiln::check
