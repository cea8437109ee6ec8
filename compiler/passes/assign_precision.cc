#include "compiler/passes/assign_precision.h"

#include "compiler/ir/kiln_ops.h"

namespace kiln::passes {
namespace {

bool IsProduct(const Node& n) {
  if (n.domain.empty()) return n.op_type == "MatMul" || n.op_type == "Gemm" || n.op_type == "Conv";
  return n.domain == kKilnDomain &&
         (n.op_type == kiln_ops::kFusedMatMul || n.op_type == kiln_ops::kFusedConv);
}

bool Float32(const Value* v) { return v && v->dtype == DType::kFloat32; }

}  // namespace

absl::StatusOr<bool> AssignPrecision(Graph& graph, const std::string& precision) {
  if (precision != "bf16") {
    return absl::InvalidArgumentError("assign_precision: unknown precision '" + precision + "'");
  }
  bool changed = false;
  for (const auto& node : graph.nodes()) {
    Node& n = *node;
    if (!IsProduct(n) || !Float32(n.input(0)) || !Float32(n.output(0))) continue;
    const Value* b = n.input(1);
    if (!Float32(b) || !b->is_constant() || b->constant->rank() < 2) continue;
    if (n.GetString(kiln_ops::kPrecisionAttr, "") == precision) continue;
    n.attrs[kiln_ops::kPrecisionAttr] = Attribute::String(precision);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::passes
