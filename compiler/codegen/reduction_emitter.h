// Kernels that reduce along axes: Softmax / LogSoftmax, LayerNormalization, Reduce* over
// constant axes, GlobalAveragePool / GlobalMaxPool. One block per output row (a grid-stride
// loop over rows), threads striding over the row, combined by kiln_block_reduce (shared
// memory and __syncthreads); float32 with float accumulation.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/codegen/cuda_kernel.h"
#include "ir/graph.h"

namespace kiln::codegen {

bool IsReductionNode(const Node& node);
absl::StatusOr<std::vector<Kernel>> EmitReduction(const Node& node, const std::string& name);

// The input dims a Reduce* node (or a global pool) reduces, as a mask over the input's rank.
absl::StatusOr<std::vector<bool>> ReducedDims(const Node& node, size_t rank);

}  // namespace kiln::codegen
