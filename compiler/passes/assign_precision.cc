#include "compiler/passes/assign_precision.h"

#include <set>

#include "ir/kiln_ops.h"

namespace kiln::passes {
namespace {

bool IsProduct(const Node& n) {
  if (n.domain.empty()) return n.op_type == "MatMul" || n.op_type == "Gemm" || n.op_type == "Conv";
  return n.domain == kKilnDomain &&
         (n.op_type == kiln_ops::kFusedMatMul || n.op_type == kiln_ops::kFusedConv);
}

bool Float32(const Value* v) { return v && v->dtype == DType::kFloat32; }

// A product with constant float32 weights (input 1, rank >= 2): what bf16 may take.
bool WeightProduct(const Node& n) {
  if (!IsProduct(n) || !Float32(n.input(0)) || !Float32(n.output(0))) return false;
  const Value* b = n.input(1);
  return Float32(b) && b->is_constant() && b->constant->rank() >= 2;
}

// Ops a softmax's input passes through on its way from the score product: layout, scaling,
// masking, and the product of two activations itself (q @ k^T).
bool ScorePathOp(const Node& n) {
  static const std::set<std::string> ops = {"Add", "Sub", "Mul", "Div", "Reshape", "Transpose",
                                            "Squeeze", "Unsqueeze", "Where", "Cast", "Identity",
                                            "MatMul", "Expand", "Slice"};
  if (n.domain == kKilnDomain) {
    return n.op_type == kiln_ops::kFusedElementwise || n.op_type == kiln_ops::kFusedMatMul;
  }
  return n.domain.empty() && ops.count(n.op_type) > 0;
}

// The weight products upstream of every Softmax along its score path (attention's query and
// key projections): exp() turns a score's rounding error into a relative error of the
// weights, so bf16 there costs most of the error and little of the time.
std::set<const Node*> ScoreProducers(const Graph& graph) {
  std::set<const Node*> found;
  for (const auto& node : graph.nodes()) {
    if (!node->domain.empty() || node->op_type != "Softmax") continue;
    std::vector<std::pair<const Value*, int>> stack = {{node->input(0), 0}};
    std::set<const Value*> seen;
    while (!stack.empty()) {
      auto [v, depth] = stack.back();
      stack.pop_back();
      if (!v || !v->producer || depth > 12 || !seen.insert(v).second) continue;
      const Node& p = *v->producer;
      if (WeightProduct(p)) {
        found.insert(&p);
      } else if (ScorePathOp(p)) {
        for (const Value* in : p.inputs) stack.push_back({in, depth + 1});
      }
    }
  }
  return found;
}

}  // namespace

absl::StatusOr<bool> AssignPrecision(Graph& graph, const std::string& precision) {
  if (!IsLowerPrecision(precision)) {
    return absl::InvalidArgumentError("assign_precision: unknown precision '" + precision + "'");
  }
  const std::set<const Node*> keep =
      precision == "bf16-mixed" ? ScoreProducers(graph) : std::set<const Node*>{};
  bool changed = false;
  for (const auto& node : graph.nodes()) {
    Node& n = *node;
    if (!WeightProduct(n) || keep.count(&n)) continue;
    if (n.GetString(kiln_ops::kPrecisionAttr, "") == "bf16") continue;
    n.attrs[kiln_ops::kPrecisionAttr] = Attribute::String("bf16");
    changed = true;
  }
  return changed;
}

}  // namespace kiln::passes
