#include "ir/graph_edit.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace kiln {

void RemoveNodes(Graph& graph, const std::vector<Node*>& nodes) {
  if (nodes.empty()) return;
  // Flat: a fusion may remove most of a 200k-node graph at once, and a node-based set
  // allocates per entry.
  const absl::flat_hash_set<const Node*> gone(nodes.begin(), nodes.end());
  for (Node* node : nodes) {
    for (Value* out : node->outputs) {
      if (out && out->producer == node) out->producer = nullptr;
    }
  }
  auto& list = graph.mutable_nodes();
  list.erase(
      std::remove_if(list.begin(), list.end(),
                     [&gone](const std::unique_ptr<Node>& n) { return gone.count(n.get()); }),
      list.end());
}

void InsertNodes(Graph& graph, std::vector<std::pair<Node*, std::unique_ptr<Node>>> inserts) {
  if (inserts.empty()) return;
  absl::flat_hash_map<const Node*, std::vector<size_t>> before;  // node -> inserts, in order
  for (size_t i = 0; i < inserts.size(); ++i) {
    for (Value* out : inserts[i].second->outputs) {
      if (out) out->producer = inserts[i].second.get();
    }
    if (inserts[i].first) before[inserts[i].first].push_back(i);
  }
  auto& list = graph.mutable_nodes();
  std::vector<std::unique_ptr<Node>> merged;
  merged.reserve(list.size() + inserts.size());
  for (auto& n : list) {
    auto it = before.find(n.get());
    if (it != before.end()) {
      for (size_t i : it->second) merged.push_back(std::move(inserts[i].second));
    }
    merged.push_back(std::move(n));
  }
  // What goes at the end: no `before`, or one not in the graph (InsertNode appends those).
  for (auto& [where, node] : inserts) {
    if (node) merged.push_back(std::move(node));
  }
  list = std::move(merged);
}

void ReplaceAllUses(Graph& graph, const std::unordered_map<const Value*, Value*>& map) {
  if (map.empty()) return;
  auto resolve = [&map](Value* v) {
    for (auto it = map.find(v); it != map.end(); it = map.find(v)) v = it->second;
    return v;
  };
  for (const auto& n : graph.nodes()) {
    for (Value*& in : n->inputs) {
      if (in) in = resolve(in);
    }
  }
  for (Value*& out : graph.outputs) out = resolve(out);
}

}  // namespace kiln
