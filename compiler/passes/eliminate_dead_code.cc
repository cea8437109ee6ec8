#include "compiler/passes/eliminate_dead_code.h"

#include <unordered_set>

#include "ir/graph_edit.h"

namespace kiln::passes {

absl::StatusOr<bool> EliminateDeadCode(Graph& graph) {
  // Walk backwards from the outputs: a node is live when one of its outputs is needed.
  std::unordered_set<const Value*> needed(graph.outputs.begin(), graph.outputs.end());
  std::vector<Node*> dead;
  const auto& nodes = graph.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node* n = it->get();
    bool live = false;
    for (const Value* out : n->outputs) live = live || (out && needed.count(out));
    if (!live) {
      dead.push_back(n);
      continue;
    }
    for (const Value* in : n->inputs) {
      if (in) needed.insert(in);
    }
  }
  RemoveNodes(graph, dead);
  const size_t values_before = graph.values().size();
  graph.PruneUnusedValues();
  return !dead.empty() || graph.values().size() != values_before;
}

}  // namespace kiln::passes
