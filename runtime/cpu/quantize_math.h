// Internal to runtime/cpu: QuantizeLinear / DequantizeLinear arithmetic in float32, shared by
// the standalone kernels (quantize_kernel.cc) and the Q/DQ instructions of fused element-wise
// programs (elementwise_ops.cc). Bit-identical to the reference (ops/
// ops_quantize.cc, which computes in double) for float32 data and scales and 8/16-bit types:
//
//  Quantize: the quotient x / scale in float is the reference's (it rounds the exact double
//    quotient to the scale's float32 precision, and double rounding is harmless for a
//    division). It is rounded half to even by adding and subtracting 1.5 * 2^23, which is
//    exact for |q| < 2^22 and leaves a larger |q| beyond 2^22 (so it saturates as the
//    reference's rint(q) does). The zero point's sum is exact wherever the result is in range
//    and rounds monotonically outside, so clamping gives the reference's ends. NaN -> 0 (the
//    reference's SaturateRound), +-inf -> the range's ends.
//  Dequantize: x - zero is exact in float for 8/16-bit values, and the product rounds once,
//    as the reference's exact double product rounded to float does.
//
// Written as selects, with no libm call and no pre-clamp before the rounding (GCC then keeps
// the loop branch-free and vectorizes it at every ISA level, SSE2 included).
#pragma once

#include <cstdint>

#include "ir/dtype.h"

namespace kiln::cpu::qmath {

// The closed range of the integer types the kernels quantize to; false for any other type.
inline bool Range(DType t, float* lo, float* hi) {
  switch (t) {
    case DType::kUInt8: *lo = 0.f; *hi = 255.f; return true;
    case DType::kInt8: *lo = -128.f; *hi = 127.f; return true;
    case DType::kUInt16: *lo = 0.f; *hi = 65535.f; return true;
    case DType::kInt16: *lo = -32768.f; *hi = 32767.f; return true;
    default: return false;
  }
}

// saturate(round_half_even(x / scale) + zero) as an integral float in [lo, hi]; NaN gives 0.
[[gnu::always_inline]] inline float Quantize(float x, float scale, float zero, float lo, float hi) {
  float v = x / scale;
  v = (v + 12582912.f) - 12582912.f;
  v = v + zero;
  v = v < lo ? lo : v;
  v = v > hi ? hi : v;
  return v != v ? 0.f : v;
}

// (q - zero) * scale for q and zero of an 8/16-bit type.
[[gnu::always_inline]] inline float Dequantize(float q, float scale, float zero) {
  return (q - zero) * scale;
}

}  // namespace kiln::cpu::qmath
