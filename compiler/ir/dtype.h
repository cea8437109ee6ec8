// Element types. The numbering is ONNX's TensorProto.DataType, so conversion at the
// importer/exporter boundary is a cast, and error messages can quote ONNX's names.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace kiln {

enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kComplex64 = 14,
  kComplex128 = 15,
  kBFloat16 = 16,
  kFloat8E4M3FN = 17,
  kFloat8E4M3FNUZ = 18,
  kFloat8E5M2 = 19,
  kFloat8E5M2FNUZ = 20,
  kUInt4 = 21,
  kInt4 = 22,
  kFloat4E2M1 = 23,
  kFloat8E8M0 = 24,
  kUInt2 = 25,
  kInt2 = 26,
};

// Bytes per element; 0 for types Kiln cannot hold in a dense buffer (string, sub-byte).
size_t DTypeSize(DType t);
// ONNX's upper-case name ("FLOAT", "INT64", ...), or "DTYPE(<n>)" for unknown numbers.
std::string DTypeName(DType t);
// True for the types the reference interpreter and every backend hold natively.
bool IsSupportedDType(DType t);
bool IsFloatDType(DType t);     // float16, bfloat16, float32, float64
bool IsIntegerDType(DType t);   // signed and unsigned integers, not bool
bool IsSignedDType(DType t);
// Positive numbers are element types (possibly newer than Kiln knows: those are reported as
// unsupported, not as invalid); zero and negative numbers are invalid.
bool IsValidOnnxDType(int32_t v);

// IEEE half and bfloat16 stored as raw bits; arithmetic happens in float/double.
struct Float16 {
  uint16_t bits = 0;
};
struct BFloat16 {
  uint16_t bits = 0;
};
static_assert(sizeof(Float16) == 2 && sizeof(BFloat16) == 2);

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);  // round to nearest even, overflow to inf, NaN kept
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);  // round to nearest even, NaN kept

}  // namespace kiln
