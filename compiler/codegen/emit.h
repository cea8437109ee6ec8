// The code generator's front door: the kernels of one IR node, in launch order, for the
// CUDA engine (which calls cuDNN / cuBLASLt for convolutions and products instead, and a
// host fallback for what no generator takes).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/codegen/cuda_kernel.h"
#include "ir/graph.h"

namespace kiln::codegen {

// Whether some generator takes the node's op type (its dtypes or attributes may still be
// refused with UNIMPLEMENTED).
bool HasGenerator(const Node& node);
// The node's kernels, named `name` (and `name_K` when there are several); UNIMPLEMENTED for
// nodes no generator takes, INVALID_ARGUMENT for malformed ones (no static shape, bad axes).
absl::StatusOr<std::vector<Kernel>> EmitNodeKernels(const Node& node, const std::string& name);

}  // namespace kiln::codegen
