#include "compiler/codegen/shapes.h"

namespace kiln::codegen {

absl::StatusOr<std::vector<int64_t>> StaticShapeOf(const Value* v) {
  if (!v) return absl::InvalidArgumentError("missing value");
  if (!v->shape || !IsStatic(*v->shape)) {
    return absl::InvalidArgumentError("value '" + v->name + "' has no static shape");
  }
  return StaticDims(*v->shape);
}

absl::StatusOr<std::vector<int64_t>> ConstantInts(const Node& node, size_t input) {
  const Value* v = node.input(input);
  if (!v) return std::vector<int64_t>{};
  if (!v->is_constant()) {
    return absl::UnimplementedError(node.Describe() + ": input " + std::to_string(input) +
                                    " is not a constant");
  }
  if (!IsIntegerDType(v->constant->dtype())) {
    return absl::InvalidArgumentError(node.Describe() + ": input " + std::to_string(input) +
                                      " is not an integer tensor");
  }
  return v->constant->ToInt64Vector();
}

absl::StatusOr<int64_t> NormalizedAxis(const Node& node, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(node.Describe() + ": axis " + std::to_string(axis) +
                                      " out of range for rank " + std::to_string(rank));
  }
  return axis < 0 ? axis + rank : axis;
}

}  // namespace kiln::codegen
