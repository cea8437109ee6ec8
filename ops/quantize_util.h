// Private to the quantization kernels (ops_quantize.cc, ops_quantize_linalg.cc): the integer
// ranges of the quantized types, round-half-even saturation, and how a scale or zero point
// tensor maps onto the elements of the tensor it quantizes (per tensor, per axis, blocked).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/kernel_util.h"

namespace kiln::ref::quant {

// The closed range of an integer quantized type (int8..uint16, int32, int4/uint4, int2/uint2);
// false for anything else.
bool IntegerRange(DType t, double& lo, double& hi);

// round-half-to-even(v) clamped to t's range (t an integer quantized type; NaN gives 0).
int64_t SaturateRound(DType t, double v);

// Stores v (already divided by the scale, zero point added) into element i of y: integer
// types round half to even and saturate; float8/float4 types round to nearest even,
// saturating when `saturate` (float4 always saturates).
void StoreQuantized(Tensor& y, int64_t i, double v, bool saturate);

// For each element of a tensor of `shape`, the index of its scale in a tensor of
// `param_shape`: per tensor (one element), per axis (1-D of shape[axis]) or blocked (same
// rank, shape[axis] split in blocks of block_size). INVALID_ARGUMENT when nothing fits.
absl::StatusOr<std::vector<int64_t>> ParamIndex(const Node& node, const std::vector<int64_t>& shape,
                                                const std::vector<int64_t>& param_shape,
                                                int64_t axis, int64_t block_size);

// v rounded to the precision of float dtype t (float32, float16, bfloat16; float64 as is).
double RoundTo(DType t, double v);

}  // namespace kiln::ref::quant

namespace kiln::ref {

// QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear (ops_quantize.cc), which also
// registers the next one.
void RegisterQuantizeKernels(KernelRegistry& r);
// MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv (ops_quantize_linalg.cc).
void RegisterQuantizedLinalgKernels(KernelRegistry& r);

}  // namespace kiln::ref
