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

// Bytes per element in memory; 0 for types Kiln cannot hold in a dense buffer (string).
// The sub-byte types (int4, uint4, float4e2m1, int2, uint2) take one byte per element in
// memory and are packed only in ONNX protos (see SubByteBits).
size_t DTypeSize(DType t);
// ONNX's upper-case name ("FLOAT", "INT64", ...), or "DTYPE(<n>)" for unknown numbers.
std::string DTypeName(DType t);
// True for the types the reference interpreter and every backend hold natively.
bool IsSupportedDType(DType t);
bool IsFloatDType(DType t);    // float16, bfloat16, float32, float64
bool IsIntegerDType(DType t);  // signed and unsigned integers of 8+ bits, not bool
bool IsSignedDType(DType t);
// The narrow types (float8 x4, float8e8m0, float4e2m1, int4, uint4, int2, uint2): held one
// byte per element, converted on element access. Only Cast/CastLike (and whatever copies
// element bytes) handle them; arithmetic kernels report UNIMPLEMENTED. They are deliberately
// outside IsFloatDType/IsIntegerDType so no arithmetic path picks them up by accident.
bool IsNarrowDType(DType t);
bool IsNarrowFloatDType(DType t);  // float8 x4, float8e8m0, float4e2m1
// Bits per element in ONNX's packed form for int4/uint4/float4e2m1 (4) and int2/uint2 (2);
// 0 for every other type.
int SubByteBits(DType t);
// Wraps an integer into a narrow integer type (int4/uint4/int2/uint2) modulo 2^bits,
// sign-extended for the signed ones: what Cast does for out-of-range values.
int64_t WrapNarrowInt(DType t, int64_t v);
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

// float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ), float4e2m1 and float8e8m0 codes. A float4 code
// sits in the low nibble. Decoding is exact in double.
double NarrowFloatToDouble(DType t, uint8_t code);
// Round to nearest even. saturate (ONNX Cast's attribute, default true) clamps overflow and
// infinities to the largest finite value; otherwise they become inf (E5M2) or NaN (the FN
// and FNUZ types). float4e2m1 has neither, so it always saturates.
uint8_t DoubleToFloat8(DType t, double v, bool saturate);
// float8e8m0 holds only a power of two 2^(code-127); 0xff is NaN. ONNX's round_mode picks
// the neighbouring power for values in between.
enum class E8M0Rounding { kUp, kDown, kNearest };
uint8_t DoubleToE8M0(double v, bool saturate, E8M0Rounding mode);

}  // namespace kiln
