#include "compiler/passes/recognize_patterns.h"

#include "compiler/passes/recognize_match.h"

namespace kiln::passes {
namespace {

// Each pattern is anchored at the one node type it always contains, so most nodes cost one
// string compare.
bool RecognizeAt(recognize::Rewriter& rw, Node& n) {
  if (!n.domain.empty()) return false;
  const std::string& op = n.op_type;
  if (op == "ReduceMean") return recognize::RecognizeLayerNorm(rw, n);
  if (op == "Erf") return recognize::RecognizeGeluErf(rw, n);
  if (op == "Tanh") return recognize::RecognizeGeluTanh(rw, n);
  if (op == "HardSigmoid") return recognize::RecognizeHardSwishFromHardSigmoid(rw, n);
  if (op == "Clip") return recognize::RecognizeHardSwishFromClip(rw, n);
  if (op == "Sigmoid") return recognize::RecognizeSilu(rw, n);
  return false;
}

}  // namespace

absl::StatusOr<bool> RecognizePatterns(Graph& graph) {
  recognize::Rewriter rw{graph, {}};
  // A snapshot: rewrites insert and remove nodes; removed anchors are skipped (a pattern's
  // nodes are never an anchor of another match once swallowed).
  std::vector<Node*> nodes;
  for (const auto& n : graph.nodes()) nodes.push_back(n.get());
  bool changed = false;
  for (Node* n : nodes) {
    if (rw.removed.count(n)) continue;
    changed = RecognizeAt(rw, *n) || changed;
  }
  if (changed) graph.PruneUnusedValues();
  return changed;
}

}  // namespace kiln::passes
