// Shared by the passes that fold a node's producer into it: the producer may disappear only
// when the node is its value's only reader and that value is not a graph output.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace kiln::passes {

// The node producing n's input 0 when n is that value's only reader and it is not a graph
// output; nullptr otherwise.
inline Node* ExclusiveProducer(const Graph& graph, const Node& n) {
  Value* in = n.input(0);
  if (!in || !in->producer || graph.IsGraphOutput(in)) return nullptr;
  const std::vector<Node*> users = graph.Consumers(in);
  return users.size() == 1 && users[0] == &n ? in->producer : nullptr;
}

}  // namespace kiln::passes
