#include "runtime/cpu/nonfinite_guard.h"

#include <cmath>

#include "runtime/cpu/isa.h"

namespace kiln::cpu {
namespace {

// NaN and inf both fail `a <= FLT_MAX`, so one compare per element finds them; the max is a
// plain select the vectorizer keeps in registers.
KILN_ISA_BODY float FiniteMaxAbsImplBody(const float* x, int64_t n) {
  constexpr float kMax = std::numeric_limits<float>::max();
  float m = 0.f;
  int bad = 0;
#pragma omp simd reduction(max : m) reduction(| : bad)
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    bad |= !(a <= kMax);
    m = a > m ? a : m;
  }
  return bad ? std::numeric_limits<float>::infinity() : m;
}
KILN_ISA_VERSIONS(float, FiniteMaxAbsImpl, (const float* x, int64_t n), (x, n))

}  // namespace

float FiniteMaxAbs(const float* x, int64_t n) { return FiniteMaxAbsImpl(x, n); }

}  // namespace kiln::cpu
