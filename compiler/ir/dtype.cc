#include "compiler/ir/dtype.h"

#include <cmath>

namespace kiln {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kInt32: case DType::kUInt32: return 4;
    case DType::kUInt8: case DType::kInt8: case DType::kBool: return 1;
    case DType::kFloat8E4M3FN: case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2: case DType::kFloat8E5M2FNUZ: return 1;
    case DType::kUInt16: case DType::kInt16: case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kInt64: case DType::kFloat64: case DType::kUInt64:
    case DType::kComplex64: return 8;
    case DType::kComplex128: return 16;
    default: return 0;
  }
}

std::string DTypeName(DType t) {
  switch (t) {
    case DType::kUndefined: return "UNDEFINED";
    case DType::kFloat32: return "FLOAT";
    case DType::kUInt8: return "UINT8";
    case DType::kInt8: return "INT8";
    case DType::kUInt16: return "UINT16";
    case DType::kInt16: return "INT16";
    case DType::kInt32: return "INT32";
    case DType::kInt64: return "INT64";
    case DType::kString: return "STRING";
    case DType::kBool: return "BOOL";
    case DType::kFloat16: return "FLOAT16";
    case DType::kFloat64: return "DOUBLE";
    case DType::kUInt32: return "UINT32";
    case DType::kUInt64: return "UINT64";
    case DType::kComplex64: return "COMPLEX64";
    case DType::kComplex128: return "COMPLEX128";
    case DType::kBFloat16: return "BFLOAT16";
    case DType::kFloat8E4M3FN: return "FLOAT8E4M3FN";
    case DType::kFloat8E4M3FNUZ: return "FLOAT8E4M3FNUZ";
    case DType::kFloat8E5M2: return "FLOAT8E5M2";
    case DType::kFloat8E5M2FNUZ: return "FLOAT8E5M2FNUZ";
    case DType::kUInt4: return "UINT4";
    case DType::kInt4: return "INT4";
    case DType::kFloat4E2M1: return "FLOAT4E2M1";
    case DType::kFloat8E8M0: return "FLOAT8E8M0";
    case DType::kUInt2: return "UINT2";
    case DType::kInt2: return "INT2";
  }
  return "DTYPE(" + std::to_string(static_cast<int32_t>(t)) + ")";
}

bool IsSupportedDType(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kFloat64: case DType::kFloat16:
    case DType::kBFloat16: case DType::kInt8: case DType::kInt16:
    case DType::kInt32: case DType::kInt64: case DType::kUInt8:
    case DType::kUInt16: case DType::kUInt32: case DType::kUInt64:
    case DType::kBool: return true;
    default: return false;
  }
}

bool IsFloatDType(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 ||
         t == DType::kBFloat16;
}

bool IsIntegerDType(DType t) {
  switch (t) {
    case DType::kInt8: case DType::kInt16: case DType::kInt32: case DType::kInt64:
    case DType::kUInt8: case DType::kUInt16: case DType::kUInt32: case DType::kUInt64:
      return true;
    default: return false;
  }
}

bool IsSignedDType(DType t) {
  return t == DType::kInt8 || t == DType::kInt16 || t == DType::kInt32 ||
         t == DType::kInt64 || IsFloatDType(t);
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

}  // namespace kiln
