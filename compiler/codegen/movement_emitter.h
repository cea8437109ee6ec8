// Kernels that move data without arithmetic: Transpose, Slice, Expand, Concat, Split (strided
// copies, one per operand pair), Gather, Pad and Tile (a per-dim index map). Elements are
// moved as unsigned words of their size, so every dtype of 1, 2, 4 or 8 bytes is served.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/codegen/cuda_kernel.h"
#include "compiler/codegen/index_space.h"
#include "ir/graph.h"

namespace kiln::codegen {

bool IsMovementNode(const Node& node);
absl::StatusOr<std::vector<Kernel>> EmitMovement(const Node& node, const std::string& name);

// dst[dst offset] = src[src offset] over `space` (operand 0: source, 1: destination).
Kernel EmitStridedCopy(const std::string& name, size_t elem_bytes, const IndexSpace& space,
                       KernelParam src, KernelParam dst);

// The start and step of each axis of a Slice with constant bounds (ONNX's clamping), for an
// input of shape `in`; INVALID_ARGUMENT for a zero step or a bad axis.
struct SliceAxes {
  std::vector<int64_t> start, step;  // one per input dim (untouched dims: 0 and 1)
};
absl::StatusOr<SliceAxes> ResolveSlice(const Node& node, const std::vector<int64_t>& in);

}  // namespace kiln::codegen
