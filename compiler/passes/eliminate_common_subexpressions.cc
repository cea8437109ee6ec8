#include "compiler/passes/eliminate_common_subexpressions.h"

#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "compiler/passes/node_key.h"

namespace kiln::passes {
namespace {

std::string NodeKey(const Node& n) {
  std::ostringstream os;
  for (const Value* in : n.inputs) os << static_cast<const void*>(in) << ',';
  os << '|' << n.outputs.size() << '|';
  return OpAndAttrsKey(n) + os.str();
}

bool Deterministic(const Node& n) {
  static const std::set<std::string> kRandom = {"RandomNormal", "RandomUniform",
                                                "RandomNormalLike", "RandomUniformLike",
                                                "Multinomial", "Bernoulli", "Dropout"};
  return !(n.domain.empty() && kRandom.count(n.op_type));
}

bool SameTensor(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.raw() == b.raw() || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

// Hash of dtype, shape and bytes without copying the bytes (weights can be hundreds of MB).
size_t TensorHash(const Tensor& t) {
  size_t h = std::hash<std::string_view>()(
      std::string_view(static_cast<const char*>(t.raw()), t.nbytes()));
  h ^= std::hash<std::string>()(ShapeToString(t.shape())) + static_cast<size_t>(t.dtype());
  return h;
}

// Merges constants with identical contents; returns true if any use was redirected.
bool MergeConstants(Graph& graph) {
  std::unordered_map<size_t, std::vector<Value*>> buckets;
  bool changed = false;
  std::vector<std::pair<Value*, Value*>> merges;
  for (const auto& v : graph.values()) {
    if (!v->constant || graph.IsGraphOutput(v.get())) continue;
    std::vector<Value*>& bucket = buckets[TensorHash(*v->constant)];
    Value* same = nullptr;
    for (Value* c : bucket) {
      if (SameTensor(*c->constant, *v->constant)) same = c;
    }
    if (same) {
      merges.emplace_back(v.get(), same);
    } else {
      bucket.push_back(v.get());
    }
  }
  for (auto [dup, keep] : merges) {
    if (graph.Consumers(dup).empty()) continue;
    graph.ReplaceAllUses(dup, keep);
    changed = true;
  }
  return changed;
}

bool AnyGraphOutput(const Graph& graph, const Node& n) {
  for (const Value* out : n.outputs) {
    if (out && graph.IsGraphOutput(out)) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<bool> EliminateCommonSubexpressions(Graph& graph) {
  bool changed = MergeConstants(graph);
  std::unordered_map<std::string, Node*> seen;
  std::vector<Node*> removed;
  for (const auto& node : graph.nodes()) {
    Node& n = *node;
    if (!Deterministic(n)) continue;
    auto [it, inserted] = seen.emplace(NodeKey(n), &n);
    if (inserted || AnyGraphOutput(graph, n)) continue;
    Node& keep = *it->second;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i] && keep.outputs[i]) graph.ReplaceAllUses(n.outputs[i], keep.outputs[i]);
    }
    bool all_mapped = true;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      all_mapped = all_mapped && (!n.outputs[i] || keep.outputs[i]);
    }
    if (all_mapped) removed.push_back(&n);
  }
  for (Node* n : removed) graph.RemoveNode(n);
  if (changed || !removed.empty()) graph.PruneUnusedValues();
  return changed || !removed.empty();
}

}  // namespace kiln::passes
