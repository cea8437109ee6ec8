#include "compiler/passes/fold_transpose_into_matmul.h"

#include "ir/kiln_ops.h"

namespace kiln::passes {
namespace {

bool IsMatMul(const Node& n) { return n.domain.empty() && n.op_type == "MatMul"; }
bool IsFusedMatMul(const Node& n) {
  return n.domain == kKilnDomain && n.op_type == kiln_ops::kFusedMatMul;
}

// Whether `t` is a Transpose whose permutation swaps the last two of r >= 2 dims and keeps
// every other dim in place. A missing perm reverses the dims: that is this swap for r = 2.
bool SwapsLastTwo(const Node* t) {
  if (!t || !t->domain.empty() || t->op_type != "Transpose" || !t->input(0)) return false;
  std::vector<int64_t> perm = t->GetInts("perm");
  if (perm.empty()) {
    const Value* in = t->input(0);
    if (!in->shape || in->shape->size() != 2) return false;
    perm = {1, 0};
  }
  const int64_t r = static_cast<int64_t>(perm.size());
  if (r < 2) return false;
  for (int64_t i = 0; i + 2 < r; ++i) {
    if (perm[i] != i) return false;
  }
  return perm[r - 2] == r - 1 && perm[r - 1] == r - 2;
}

// Folds a last-two-dims Transpose feeding operand `which` (0: A, 1: B) of `n`.
bool FoldOperand(Node& n, size_t which) {
  const Value* v = n.input(which);
  if (!v || !v->shape || v->shape->size() < 2 || !SwapsLastTwo(v->producer)) return false;
  Value* source = v->producer->input(0);
  if (IsMatMul(n)) {
    n.op_type = kiln_ops::kFusedMatMul;
    n.domain = kKilnDomain;
    n.opset = 1;
  }
  const char* flag = which == 0 ? "transA" : "transB";
  n.attrs[flag] = Attribute::Int(n.GetInt(flag, 0) != 0 ? 0 : 1);
  n.inputs[which] = source;
  return true;
}

}  // namespace

absl::StatusOr<bool> FoldTransposeIntoMatMul(Graph& graph) {
  bool changed = false;
  for (const auto& node : graph.nodes()) {
    Node& n = *node;
    if (!IsMatMul(n) && !IsFusedMatMul(n)) continue;
    for (size_t which : {0, 1}) changed = FoldOperand(n, which) || changed;
  }
  if (changed) graph.PruneUnusedValues();
  return changed;
}

}  // namespace kiln::passes
