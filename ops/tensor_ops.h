// Private to the reference tensor/shape/layout kernels (ops_tensor.cc, ops_layout.cc,
// ops_cast.cc, ops_resize.cc): the per-file registration functions that
// RegisterTensorKernels calls, and the small helpers they share.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ops/kernel_util.h"

namespace kiln::ref {

void RegisterShapeKernels(KernelRegistry& r);    // Shape, Size, Reshape, Expand, Tile...
void RegisterLayoutKernels(KernelRegistry& r);   // Transpose, Concat, Split, Slice, Pad...
void RegisterCastKernels(KernelRegistry& r);     // Cast, CastLike
void RegisterResizeKernels(KernelRegistry& r);   // Resize, Upsample
void RegisterSelectKernels(KernelRegistry& r);   // Compress, NonZero, Unique
void RegisterReorderKernels(KernelRegistry& r);  // ReverseSequence, CenterCropPad, TensorScatter

// Hostile shapes (Expand to 2^40 elements) must fail cleanly instead of allocating.
inline constexpr int64_t kMaxOutputElements = int64_t{1} << 31;

// Validates an output shape before allocation: negative dims are INVALID_ARGUMENT, more
// than kMaxOutputElements elements (or an overflowing product) RESOURCE_EXHAUSTED.
absl::Status CheckOutputShape(const Node& node, const std::vector<int64_t>& shape);

// Reads an int32/int64 tensor (shape, axes, pads, repeats...) as int64 values.
absl::StatusOr<std::vector<int64_t>> ReadInts(const Node& node, const Tensor& t, const char* what);

// Calls fn(coord, flat) for every element of `shape` in row-major order.
void ForEachIndex(const std::vector<int64_t>& shape,
                  const std::function<void(const std::vector<int64_t>&, int64_t)>& fn);

// Builds a tensor of `out_shape` (validated) whose element at coord is the src element at
// the flat index src_index(coord): the shared core of Transpose, Tile, Expand, Pad...
// src_index returns -1 to leave the element as `fill` (or zero when fill is null).
absl::StatusOr<Tensor> GatherElements(
    const Node& node, const Tensor& src, const std::vector<int64_t>& out_shape,
    const std::function<int64_t(const std::vector<int64_t>&)>& src_index,
    const Tensor* fill = nullptr);

// The data-movement kernels accept every supported dtype; anything else is UNIMPLEMENTED.
absl::Status CheckMovableDType(const Node& node, const Tensor& t);

// Validates an axes list against `rank`, normalizing negatives; duplicates are invalid.
absl::StatusOr<std::vector<int64_t>> NormalizeAxes(const Node& node,
                                                   const std::vector<int64_t>& axes, int64_t rank);

// Stores v into integer element i of y: truncated toward zero, saturated to the dtype's
// range, NaN as 0 (the float -> int rule of Cast).
void StoreFloatAsInt(double v, Tensor& y, int64_t i);

// Resolves Reshape's target shape: 0 copies the input dim (unless allowzero), one -1 is
// inferred from the element count.
absl::StatusOr<std::vector<int64_t>> ReshapeTarget(const Node& node,
                                                   const std::vector<int64_t>& in_shape,
                                                   std::vector<int64_t> target, bool allowzero);

}  // namespace kiln::ref
