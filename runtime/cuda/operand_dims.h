// What the cuDNN and cuBLASLt call plans (conv_plan.cc, matmul_plan.cc) ask of an operand
// before planning a library call for it.
#pragma once

#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::cuda {

// The operand's dims: INVALID_ARGUMENT without a static shape, UNIMPLEMENTED when it is not
// float32 (the library calls are planned for float32 only).
inline absl::StatusOr<std::vector<int64_t>> StaticFloatDims(const Value* v, const Node& node) {
  if (!v || !v->shape || !IsStatic(*v->shape)) {
    return absl::InvalidArgumentError(node.Describe() + ": operand without a static shape");
  }
  if (v->dtype != DType::kFloat32)
    return absl::UnimplementedError(node.Describe() + ": not float32");
  return StaticDims(*v->shape);
}

}  // namespace kiln::cuda
