#include "compiler/passes/eliminate_identity.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "ir/graph_edit.h"

namespace kiln::passes {
namespace {

bool SameStaticShape(const Value* a, const Value* b) {
  return a && b && a->shape && b->shape && IsStatic(*a->shape) && IsStatic(*b->shape) &&
         StaticDims(*a->shape) == StaticDims(*b->shape) && a->dtype == b->dtype;
}

// A constant input whose every element equals `v` (absent counts as true when allowed).
bool ConstantAll(const Value* in, int64_t v, bool absent_ok) {
  if (!in) return absent_ok;
  if (!in->constant) return false;
  const Tensor& t = *in->constant;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.GetInt(i) != v) return false;
  }
  return true;
}

// A constant whose every element is exactly `v` (compared as double: a ratio of 0.3 is not 0).
bool ConstantAllDouble(const Value* in, double v) {
  if (!in || !in->constant) return false;
  const Tensor& t = *in->constant;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.GetDouble(i) != v) return false;
  }
  return true;
}

// Dropout copies its input when not training, and also in training mode with a ratio of 0
// (nothing dropped, scale 1/(1 - 0)): exporters write the latter for attention dropout with
// p = 0 (torchvision's Swin). Only when its mask output is unused.
bool IsInferenceDropout(const Graph& graph, const Node& n) {
  Value* mask = n.output(1);
  if (mask && (!graph.Consumers(mask).empty() || graph.IsGraphOutput(mask))) return false;
  if (ConstantAll(n.input(2), 0, /*absent_ok=*/true)) return true;  // training_mode false
  return ConstantAllDouble(n.input(1), 0.0);
}

bool IsIdentityTranspose(const Node& n) {
  const Value* in = n.input(0);
  if (!in || !in->shape) return false;
  std::vector<int64_t> perm = n.GetInts("perm");
  if (perm.empty()) return in->shape->size() <= 1;  // default perm reverses the dims
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

}  // namespace

Value* PassThroughInput(const Graph& graph, const Node& n) {
  if (!n.domain.empty() || n.inputs.empty() || !n.input(0) || !n.output(0)) return nullptr;
  Value* in = n.input(0);
  Value* out = n.output(0);
  const std::string& op = n.op_type;
  bool noop = false;
  if (op == "Identity") {
    noop = true;
  } else if (op == "Dropout") {
    noop = IsInferenceDropout(graph, n);
  } else if (op == "Cast" || op == "CastLike") {
    noop = in->dtype == out->dtype && in->dtype != DType::kUndefined;
  } else if (op == "Reshape" || op == "Expand" || op == "Flatten" || op == "Squeeze" ||
             op == "Unsqueeze") {
    noop = SameStaticShape(in, out);
  } else if (op == "Transpose") {
    noop = IsIdentityTranspose(n);
  } else if (op == "Pad") {
    noop = ConstantAll(n.input(1), 0, false);
  } else if (op == "Slice") {
    noop = SameStaticShape(in, out) && ConstantAll(n.input(4), 1, /*absent_ok=*/true);
  }
  return noop ? in : nullptr;
}

absl::StatusOr<bool> EliminateIdentity(Graph& graph) {
  // One walk in schedule order: a node's inputs take the replacements of the pass-throughs
  // before it as it is reached (what a ReplaceAllUses per removed node gave, without its
  // walk over the whole graph each time), and the removals happen at once at the end.
  std::unordered_map<const Value*, Value*> replaced;
  std::vector<Node*> removed;
  for (const auto& node : graph.nodes()) {
    for (Value*& in : node->inputs) {
      auto it = in ? replaced.find(in) : replaced.end();
      if (it != replaced.end()) in = it->second;
    }
    Value* out = node->output(0);
    Value* in = PassThroughInput(graph, *node);
    if (!in || graph.IsGraphOutput(out)) continue;
    replaced[out] = in;
    removed.push_back(node.get());
  }
  ReplaceAllUses(graph, replaced);
  RemoveNodes(graph, removed);
  if (!removed.empty()) graph.PruneUnusedValues();
  return !removed.empty();
}

}  // namespace kiln::passes
