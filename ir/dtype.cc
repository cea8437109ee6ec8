#include "ir/dtype.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

namespace kiln {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kFloat32:
    case DType::kInt32:
    case DType::kUInt32:
      return 4;
    case DType::kUInt8:
    case DType::kInt8:
    case DType::kBool:
      return 1;
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ:
    case DType::kFloat8E8M0:
    case DType::kFloat4E2M1:
    case DType::kInt4:
    case DType::kUInt4:
    case DType::kInt2:
    case DType::kUInt2:
      return 1;
    case DType::kUInt16:
    case DType::kInt16:
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kInt64:
    case DType::kFloat64:
    case DType::kUInt64:
    case DType::kComplex64:
      return 8;
    case DType::kComplex128:
      return 16;
    default:
      return 0;
  }
}

std::string DTypeName(DType t) {
  switch (t) {
    case DType::kUndefined:
      return "UNDEFINED";
    case DType::kFloat32:
      return "FLOAT";
    case DType::kUInt8:
      return "UINT8";
    case DType::kInt8:
      return "INT8";
    case DType::kUInt16:
      return "UINT16";
    case DType::kInt16:
      return "INT16";
    case DType::kInt32:
      return "INT32";
    case DType::kInt64:
      return "INT64";
    case DType::kString:
      return "STRING";
    case DType::kBool:
      return "BOOL";
    case DType::kFloat16:
      return "FLOAT16";
    case DType::kFloat64:
      return "DOUBLE";
    case DType::kUInt32:
      return "UINT32";
    case DType::kUInt64:
      return "UINT64";
    case DType::kComplex64:
      return "COMPLEX64";
    case DType::kComplex128:
      return "COMPLEX128";
    case DType::kBFloat16:
      return "BFLOAT16";
    case DType::kFloat8E4M3FN:
      return "FLOAT8E4M3FN";
    case DType::kFloat8E4M3FNUZ:
      return "FLOAT8E4M3FNUZ";
    case DType::kFloat8E5M2:
      return "FLOAT8E5M2";
    case DType::kFloat8E5M2FNUZ:
      return "FLOAT8E5M2FNUZ";
    case DType::kUInt4:
      return "UINT4";
    case DType::kInt4:
      return "INT4";
    case DType::kFloat4E2M1:
      return "FLOAT4E2M1";
    case DType::kFloat8E8M0:
      return "FLOAT8E8M0";
    case DType::kUInt2:
      return "UINT2";
    case DType::kInt2:
      return "INT2";
  }
  return "DTYPE(" + std::to_string(static_cast<int32_t>(t)) + ")";
}

bool IsSupportedDType(DType t) {
  switch (t) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
    case DType::kBool:
      return true;
    default:
      return IsNarrowDType(t);
  }
}

namespace {

bool OneOf(DType t, std::initializer_list<DType> set) {
  return std::find(set.begin(), set.end(), t) != set.end();
}

}  // namespace

bool IsNarrowDType(DType t) {
  return IsNarrowFloatDType(t) || t == DType::kInt4 || t == DType::kUInt4 || t == DType::kInt2 ||
         t == DType::kUInt2;
}

bool IsNarrowFloatDType(DType t) {
  return OneOf(t, {DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2,
                   DType::kFloat8E5M2FNUZ, DType::kFloat8E8M0, DType::kFloat4E2M1});
}

int SubByteBits(DType t) {
  switch (t) {
    case DType::kInt4:
    case DType::kUInt4:
    case DType::kFloat4E2M1:
      return 4;
    case DType::kInt2:
    case DType::kUInt2:
      return 2;
    default:
      return 0;
  }
}

int64_t WrapNarrowInt(DType t, int64_t v) {
  const int bits = SubByteBits(t);
  const uint64_t u = static_cast<uint64_t>(v) & ((uint64_t{1} << bits) - 1);
  const bool is_signed = t == DType::kInt4 || t == DType::kInt2;
  if (is_signed && (u >> (bits - 1)) != 0) {
    return static_cast<int64_t>(u) - (int64_t{1} << bits);
  }
  return static_cast<int64_t>(u);
}

bool IsFloatDType(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 ||
         t == DType::kBFloat16;
}

bool IsIntegerDType(DType t) {
  return OneOf(t, {DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64, DType::kUInt8,
                   DType::kUInt16, DType::kUInt32, DType::kUInt64});
}

bool IsSignedDType(DType t) {
  return t == DType::kInt8 || t == DType::kInt16 || t == DType::kInt32 || t == DType::kInt64 ||
         IsFloatDType(t);
}

bool IsValidOnnxDType(int32_t v) { return v >= 1; }

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: value = man * 2^-24
      float f = std::ldexp(static_cast<float>(man), -24);
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    float a;
    std::memcpy(&a, &abs, 4);
    // Scale so the half subnormal unit (2^-24) becomes 1 and round to nearest even.
    float scaled = a * 16777216.0f;
    float r = std::nearbyint(scaled);
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: rebias exponent, round mantissa from 23 to 10 bits, ties to even.
  uint32_t m = abs + 0xc8000000u;  // exponent -= 112
  uint32_t round = 0xfffu + ((m >> 13) & 1u);
  m += round;
  return sign | static_cast<uint16_t>(m >> 13);
}

float BFloat16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

namespace {

// How the float8/float4 formats spend their bit patterns on specials:
//  kIeee (E5M2): exponent all ones is inf (mantissa 0) or NaN, like IEEE.
//  kFn (E4M3FN): no inf; only S.1111.111 is NaN, the rest of the top binade is finite.
//  kUz (the FNUZ types): no inf, no negative zero; 0x80 is the one NaN.
//  kNone (E2M1): every pattern is a finite number.
enum class Specials { kIeee, kFn, kUz, kNone };

struct MiniFloat {
  int man_bits;
  int bias;
  int sign_shift;   // the sign bit's position; the magnitude is the bits below it
  uint8_t max_mag;  // magnitude bits of the largest finite value
  Specials specials;
};

MiniFloat FormatOf(DType t) {
  switch (t) {
    case DType::kFloat8E4M3FN:
      return {3, 7, 7, 0x7e, Specials::kFn};
    case DType::kFloat8E4M3FNUZ:
      return {3, 8, 7, 0x7f, Specials::kUz};
    case DType::kFloat8E5M2:
      return {2, 15, 7, 0x7b, Specials::kIeee};
    case DType::kFloat8E5M2FNUZ:
      return {2, 16, 7, 0x7f, Specials::kUz};
    default:
      return {1, 1, 3, 0x7, Specials::kNone};  // float4e2m1
  }
}

// The code for a value too large for the format (after rounding), or an infinity.
uint8_t OverflowCode(const MiniFloat& f, uint8_t sign, bool saturate) {
  if (saturate || f.specials == Specials::kNone) return sign | f.max_mag;
  switch (f.specials) {
    case Specials::kIeee:
      return sign | 0x7c;  // infinity
    case Specials::kFn:
      return sign | 0x7f;  // NaN: the format has no infinity
    default:
      return 0x80;  // FNUZ NaN
  }
}

uint8_t NanCode(const MiniFloat& f, uint8_t sign) {
  switch (f.specials) {
    case Specials::kIeee:
      return sign | 0x7e;
    case Specials::kFn:
      return sign | 0x7f;
    case Specials::kUz:
      return 0x80;
    // E2M1 has no NaN. ONNX's reference (and its test data) yields 0x8, negative zero.
    default:
      return 0x8;
  }
}

}  // namespace

double NarrowFloatToDouble(DType t, uint8_t code) {
  if (t == DType::kFloat8E8M0) {
    return code == 0xff ? std::nan("") : std::ldexp(1.0, static_cast<int>(code) - 127);
  }
  const MiniFloat f = FormatOf(t);
  const uint8_t sign_bit = static_cast<uint8_t>(1u << f.sign_shift);
  code &= static_cast<uint8_t>((sign_bit << 1) - 1);
  const uint8_t mag = code & (sign_bit - 1);
  if (f.specials == Specials::kUz && code == sign_bit) return std::nan("");
  if (f.specials == Specials::kFn && mag == sign_bit - 1) return std::nan("");
  const int exp_field = mag >> f.man_bits;
  const int man = mag & ((1 << f.man_bits) - 1);
  const bool neg = (code & sign_bit) != 0;
  if (f.specials == Specials::kIeee && exp_field == (sign_bit - 1) >> f.man_bits) {
    if (man != 0) return std::nan("");
    return neg ? -INFINITY : INFINITY;
  }
  // Subnormals (exponent field 0) have no implicit leading one and the minimum exponent.
  const double v = exp_field == 0
                       ? std::ldexp(man, 1 - f.bias - f.man_bits)
                       : std::ldexp((1 << f.man_bits) + man, exp_field - f.bias - f.man_bits);
  return neg ? -v : v;
}

uint8_t DoubleToFloat8(DType t, double v, bool saturate) {
  const MiniFloat f = FormatOf(t);
  const uint8_t sign = std::signbit(v) ? static_cast<uint8_t>(1u << f.sign_shift) : 0;
  if (std::isnan(v)) return NanCode(f, sign);
  const double a = std::fabs(v);
  // Anything at or past twice the largest finite value overflows whatever the rounding; the
  // early exit also keeps the exponent arithmetic below in range.
  if (std::isinf(a) || a >= 2 * NarrowFloatToDouble(t, f.max_mag)) {
    return OverflowCode(f, sign, saturate);
  }
  // Quantize to the spacing of a's binade (subnormal spacing below the smallest normal), so
  // nearbyint does the round-to-nearest-even. The magnitude code is then the binade's offset
  // plus the count of steps: a carry into the next binade falls out of the arithmetic.
  const int min_exp = 1 - f.bias;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e with m in [0.5, 1)
  const int lead = a == 0.0 ? min_exp : std::max(e - 1, min_exp);
  const double steps = std::nearbyint(std::ldexp(a, f.man_bits - lead));
  const int mag = ((lead - min_exp) << f.man_bits) + static_cast<int>(steps);
  if (mag > f.max_mag) return OverflowCode(f, sign, saturate);
  if (mag == 0 && f.specials == Specials::kUz) return 0;  // no negative zero
  return sign | static_cast<uint8_t>(mag);
}

uint8_t DoubleToE8M0(double v, bool saturate, E8M0Rounding mode) {
  if (std::isnan(v)) return 0xff;
  // The format has no sign: the magnitude's power of two is kept.
  const double a = std::fabs(v);
  if (std::isinf(a)) return saturate ? 0xfe : 0xff;
  if (a == 0.0) return 0x00;  // the smallest value, 2^-127
  int e = 0;
  const double m = 2 * std::frexp(a, &e);  // a = m * 2^(e-1), m in [1, 2)
  int k = e - 1;
  if (m > 1.0) {
    if (mode == E8M0Rounding::kUp) {
      ++k;
    } else if (mode == E8M0Rounding::kNearest) {
      // Halfway in value is m = 1.5; a tie goes to the even code.
      if (m > 1.5 || (m == 1.5 && ((k + 127) & 1) != 0)) ++k;
    }
  }
  const int code = k + 127;
  if (code < 0) return 0x00;
  if (code > 0xfe) return saturate ? 0xfe : 0xff;
  return static_cast<uint8_t>(code);
}

}  // namespace kiln
