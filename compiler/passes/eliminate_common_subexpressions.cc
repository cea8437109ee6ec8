#include "compiler/passes/eliminate_common_subexpressions.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "compiler/passes/node_key.h"
#include "ir/graph_edit.h"

namespace kiln::passes {
namespace {

// The operator and attributes, then the input count, output count and the inputs' addresses
// as fixed-width bytes (no stream per node: CSE keys every node of the graph).
std::string NodeKey(const Node& n) {
  std::string k = OpAndAttrsKey(n);
  k += std::to_string(n.inputs.size()) + '|' + std::to_string(n.outputs.size()) + '|';
  for (const Value* in : n.inputs) {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(in);
    k.append(reinterpret_cast<const char*>(&addr), sizeof addr);
  }
  return k;
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

// A hash of dtype, shape and a fixed sample of the bytes (64 words spread over the tensor):
// equal tensors hash equal, and the memcmp in SameTensor decides. Hashing every byte cost
// what the rest of the compile did (resnet50's 100 MB of weights, every compile); two
// different weights of one shape almost always differ in the sample, and when not, memcmp
// stops at their first difference.
size_t TensorHash(const Tensor& t) {
  size_t h = std::hash<std::string>()(ShapeToString(t.shape())) + static_cast<size_t>(t.dtype());
  const char* bytes = static_cast<const char*>(t.raw());
  const size_t n = t.nbytes();
  constexpr size_t kWord = 8, kSamples = 64;
  if (n <= kWord * kSamples) {
    return h ^ std::hash<std::string_view>()(std::string_view(bytes, n));
  }
  char sample[kWord * kSamples];
  const size_t stride = (n - kWord) / (kSamples - 1);
  for (size_t i = 0; i < kSamples; ++i) std::memcpy(sample + i * kWord, bytes + i * stride, kWord);
  return h ^ std::hash<std::string_view>()(std::string_view(sample, sizeof sample));
}

// Merges constants with identical contents; returns true if any use was redirected.
bool MergeConstants(Graph& graph) {
  std::unordered_set<const Value*> read;
  for (const auto& n : graph.nodes()) read.insert(n->inputs.begin(), n->inputs.end());
  std::unordered_set<const Value*> outputs(graph.outputs.begin(), graph.outputs.end());
  std::unordered_map<size_t, std::vector<Value*>> buckets;
  std::unordered_map<const Value*, Value*> merges;
  for (const auto& v : graph.values()) {
    if (!v->constant || outputs.count(v.get())) continue;
    std::vector<Value*>& bucket = buckets[TensorHash(*v->constant)];
    Value* same = nullptr;
    for (Value* c : bucket) {
      if (SameTensor(*c->constant, *v->constant)) same = c;
    }
    if (!same) {
      bucket.push_back(v.get());
    } else if (read.count(v.get())) {  // an unread duplicate changes nothing
      merges[v.get()] = same;
    }
  }
  ReplaceAllUses(graph, merges);
  return !merges.empty();
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
  seen.reserve(graph.nodes().size());
  std::vector<Node*> removed;
  // A duplicate's outputs are replaced in the nodes after it as the walk reaches them (all
  // its readers come later in schedule order), not by a walk over the graph per duplicate.
  std::unordered_map<const Value*, Value*> replaced;
  for (const auto& node : graph.nodes()) {
    Node& n = *node;
    for (Value*& in : n.inputs) {
      auto r = in ? replaced.find(in) : replaced.end();
      if (r != replaced.end()) in = r->second;
    }
    if (!Deterministic(n)) continue;
    auto [it, inserted] = seen.emplace(NodeKey(n), &n);
    if (inserted || AnyGraphOutput(graph, n)) continue;
    Node& keep = *it->second;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i] && keep.outputs[i]) replaced[n.outputs[i]] = keep.outputs[i];
    }
    bool all_mapped = true;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      all_mapped = all_mapped && (!n.outputs[i] || keep.outputs[i]);
    }
    if (all_mapped) removed.push_back(&n);
  }
  ReplaceAllUses(graph, replaced);  // the graph outputs (the nodes have theirs already)
  RemoveNodes(graph, removed);
  if (changed || !removed.empty()) graph.PruneUnusedValues();
  return changed || !removed.empty();
}

}  // namespace kiln::passes
