#include "compiler/passes/simplify_reshapes.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "compiler/passes/exclusive_producer.h"

namespace kiln::passes {
namespace {

bool IsReshapeLike(const Node* n) {
  return n && n->domain.empty() &&
         (n->op_type == "Reshape" || n->op_type == "Flatten" || n->op_type == "Squeeze" ||
          n->op_type == "Unsqueeze");
}

bool IsTranspose(const Node* n) { return n && n->domain.empty() && n->op_type == "Transpose"; }

// Folds the reshape-like producer of n into n, which becomes Reshape(chain input, constant).
// Visiting nodes in order makes a chain of any length collapse pair by pair.
bool CollapseReshapePair(Graph& graph, Node& n) {
  if (!IsReshapeLike(&n)) return false;
  Node* p = ExclusiveProducer(graph, n);
  Value* out = n.output(0);
  if (!IsReshapeLike(p) || !out || !out->shape || !IsStatic(*out->shape)) return false;
  const std::vector<int64_t> dims = StaticDims(*out->shape);
  const bool has_zero = std::find(dims.begin(), dims.end(), 0) != dims.end();
  Value* target = graph.AddConstant(out->name + "_shape",
                                    Tensor::FromInt64(dims, {static_cast<int64_t>(dims.size())}));
  n.op_type = "Reshape";
  n.attrs.clear();
  if (has_zero) {
    n.attrs["allowzero"] = Attribute::Int(1);
    n.opset = std::max<int64_t>(n.opset, 14);  // allowzero exists from opset 14
  }
  n.inputs = {p->input(0), target};
  graph.RemoveNode(p);
  return true;
}

// Transpose's permutation; the default (no perm) reverses the input's dims.
std::optional<std::vector<int64_t>> PermOf(const Node& t) {
  const Value* in = t.input(0);
  std::vector<int64_t> perm = t.GetInts("perm");
  if (perm.empty()) {
    if (!in || !in->shape) return std::nullopt;
    perm.resize(in->shape->size());
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] != static_cast<int64_t>(i)) return std::nullopt;  // not a permutation
  }
  return perm;
}

bool IsIdentityPerm(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// Transpose(Transpose(x, p1), p2) -> Transpose(x, q): output dim i is the middle's dim p2[i],
// which is x's dim p1[p2[i]].
bool MergeTransposePair(Graph& graph, Node& t2) {
  if (!IsTranspose(&t2)) return false;
  Node* t1 = ExclusiveProducer(graph, t2);
  if (!IsTranspose(t1)) return false;
  std::optional<std::vector<int64_t>> p1 = PermOf(*t1), p2 = PermOf(t2);
  if (!p1 || !p2 || p1->size() != p2->size()) return false;
  std::vector<int64_t> q(p2->size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = (*p1)[(*p2)[i]];
  Value* x = t1->input(0);
  Value* out = t2.output(0);
  graph.RemoveNode(t1);
  t2.inputs = {x};
  t2.attrs.clear();
  if (!IsIdentityPerm(q)) {
    t2.attrs["perm"] = Attribute::Ints(q);
  } else if (graph.IsGraphOutput(out)) {
    t2.op_type = "Identity";  // the output's name is the model's contract: keep a producer
  } else {
    graph.ReplaceAllUses(out, x);
    graph.RemoveNode(&t2);
  }
  return true;
}

// kiln_view=1 on every reshape-like node not yet marked; true when any mark was added.
bool MarkViews(Graph& graph) {
  bool changed = false;
  for (const auto& n : graph.nodes()) {
    if (!IsReshapeLike(n.get()) || n->GetInt("kiln_view", 0) == 1) continue;
    n->attrs["kiln_view"] = Attribute::Int(1);
    changed = true;
  }
  return changed;
}

}  // namespace

absl::StatusOr<bool> SimplifyReshapes(Graph& graph) {
  // A snapshot in schedule order: each rewrite removes only the producer of the node being
  // visited (already visited) or that node itself (never visited again).
  std::vector<Node*> nodes;
  for (const auto& n : graph.nodes()) nodes.push_back(n.get());
  bool changed = false;
  for (Node* n : nodes) {
    changed = CollapseReshapePair(graph, *n) || MergeTransposePair(graph, *n) || changed;
  }
  changed = MarkViews(graph) || changed;
  if (changed) graph.PruneUnusedValues();
  return changed;
}

}  // namespace kiln::passes
