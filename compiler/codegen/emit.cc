#include "compiler/codegen/emit.h"

#include "compiler/codegen/elementwise_emitter.h"
#include "compiler/codegen/movement_emitter.h"
#include "compiler/codegen/pool_emitter.h"
#include "compiler/codegen/reduction_emitter.h"

namespace kiln::codegen {

bool HasGenerator(const Node& node) {
  return IsElementwiseNode(node) || IsMovementNode(node) || IsReductionNode(node) || IsPoolNode(node);
}

absl::StatusOr<std::vector<Kernel>> EmitNodeKernels(const Node& node, const std::string& name) {
  for (const Value* v : node.outputs) {
    if (v && (!v->shape || !IsStatic(*v->shape))) {
      return absl::InvalidArgumentError(node.Describe() + ": output '" + v->name + "' has no static shape");
    }
  }
  if (IsElementwiseNode(node)) return EmitElementwise(node, name);
  if (IsMovementNode(node)) return EmitMovement(node, name);
  if (IsReductionNode(node)) return EmitReduction(node, name);
  if (IsPoolNode(node)) return EmitPool(node, name);
  return absl::UnimplementedError("no kernel generator for " + node.Describe());
}

}  // namespace kiln::codegen
