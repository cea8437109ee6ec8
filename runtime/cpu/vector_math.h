// exp, tanh and erf for float, written so that a loop calling them vectorizes: straight-line
// arithmetic with selects instead of branches, and no libm calls (GCC vectorizes a libm call
// only under -ffast-math, which Kiln does not use; a scalar expf costs ~3 ns a value, and
// softmax, sigmoid and GELU spend most of their time there).
//
// Accuracy (measured over dense sweeps in tests/unit/cpu_vector_math_test.cc): exp within
// 2 ulp of the correctly rounded value over its whole range, tanh and erf within 3e-7
// absolute and 2e-6 relative. NaN propagates; exp overflows to +inf and underflows to 0
// like expf.
#pragma once

#include <cstdint>
#include <cstring>

namespace kiln::cpu::vmath {

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// 2^k for k in [-126, 127].
inline float Pow2(int32_t k) { return BitsToFloat(static_cast<uint32_t>(k + 127) << 23); }

// Cephes expf: n = round(x / ln 2), r = x - n ln 2 in two parts, e^r by a degree-6
// polynomial, times 2^n applied in two halves so that results near the overflow and
// denormal ends stay exact. Rounding adds and subtracts 1.5 * 2^23 (which also leaves n in
// the low mantissa bits): floorf and float-to-int conversions may raise FP exceptions, and
// GCC does not vectorize them without -fno-trapping-math.
inline float Exp(float x) {
  float c = x < -104.f ? -104.f : x;  // comparisons keep NaN (both are false)
  c = c > 89.f ? 89.f : c;
  const float shifted = c * 1.44269504088896341f + 12582912.f;
  const float n = shifted - 12582912.f;
  const int32_t k = static_cast<int32_t>(FloatToBits(shifted) - 0x4B400000u);
  const float r = (c - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const int32_t k1 = k >> 1;
  return p * Pow2(k1) * Pow2(k - k1);
}

// Cephes tanhf: an odd polynomial below |x| = 0.625, 1 - 2 / (e^{2|x|} + 1) above.
inline float Tanh(float x) {
  const float a = __builtin_fabsf(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = x + x * z * p;
  const float big = 1.f - 2.f / (Exp(2.f * (a < 20.f ? a : 20.f)) + 1.f);
  const float signed_big = x < 0.f ? -big : big;
  return a < 0.625f ? small : (x != x ? x : signed_big);
}

// erf: Cephes erff's odd polynomial below |x| = 1; above, 1 - q(t) e^{-x^2} with
// t = 1 / (1 + 0.3275911 |x|) (Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7 there).
inline float Erf(float x) {
  const float a = __builtin_fabsf(x);
  const float z = x * x;
  float p = 7.853861353153693e-5f;
  p = p * z - 8.010193625184903e-4f;
  p = p * z + 5.188327685732524e-3f;
  p = p * z - 2.685381193529856e-2f;
  p = p * z + 1.128358514861418e-1f;
  p = p * z - 3.761262582423300e-1f;
  p = p * z + 1.128379165726710f;
  const float small = x * p;
  const float t = 1.f / (1.f + 0.3275911f * a);
  float q = 1.061405429f;
  q = q * t - 1.453152027f;
  q = q * t + 1.421413741f;
  q = q * t - 0.284496736f;
  q = q * t + 0.254829592f;
  const float big = 1.f - q * t * Exp(-z);
  const float signed_big = x < 0.f ? -big : big;
  return a < 1.f ? small : (x != x ? x : signed_big);
}

}  // namespace kiln::cpu::vmath
