// Internal to the opset normalizer (compiler/onnx/normalize*): what its rules share: status
// helpers that name the node, small graph edits, and the Emitter that adds helper nodes.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/onnx/normalize.h"
#include "ir/graph.h"

namespace kiln::onnx_io::normalize {

using Attrs = std::map<std::string, Attribute>;

inline absl::Status Unconvertible(const Node& n, const std::string& why) {
  return absl::UnimplementedError(n.Describe() + " cannot be normalized to opset " +
                                  std::to_string(kInternalOpset) + ": " + why);
}

inline absl::Status Malformed(const Node& n, const std::string& why) {
  return absl::InvalidArgumentError(n.Describe() + ": " + why);
}

inline std::optional<int64_t> KnownRank(const Value* v) {
  if (!v || !v->shape) return std::nullopt;
  return static_cast<int64_t>(v->shape->size());
}

inline void SetInput(Node& n, size_t i, Value* v) {
  if (n.inputs.size() <= i) n.inputs.resize(i + 1, nullptr);
  n.inputs[i] = v;
}

inline bool IsUsed(const Graph& g, const Value* v) {
  return v && (g.IsGraphOutput(v) || !g.Consumers(v).empty());
}

// Drops output i (an unused optional output) so nothing claims n produces it.
inline void DropOutput(Node& n, size_t i) {
  if (i >= n.outputs.size()) return;
  if (n.outputs[i] && n.outputs[i]->producer == &n) n.outputs[i]->producer = nullptr;
  n.outputs[i] = nullptr;
  while (!n.outputs.empty() && !n.outputs.back()) n.outputs.pop_back();
}

inline absl::StatusOr<std::vector<int64_t>> IntsAttr(const Node& n, const std::string& key) {
  const Attribute* a = n.FindAttr(key);
  if (!a || a->kind != Attribute::Kind::kInts) {
    return Malformed(n, "attribute '" + key + "' must be a list of ints");
  }
  return a->ints;
}

// Builds the helper nodes and constants of one rewritten node. Helpers take the rewritten
// node's imported opset and a name derived from its name, so an error in a helper still
// points at the node the model author wrote.
class Emitter {
 public:
  Emitter(Graph& g, Node& n) : g_(g), n_(n) {}

  // A 1-D int64 constant (axes, pads, shapes: the newest forms want int64 vectors).
  Value* Ints(const std::string& what, const std::vector<int64_t>& v) {
    return g_.AddConstant(n_.name + "_" + what,
                          Tensor::FromInt64(v, {static_cast<int64_t>(v.size())}));
  }
  Value* Floats(const std::string& what, const std::vector<float>& v) {
    return g_.AddConstant(n_.name + "_" + what,
                          Tensor::FromFloat(v, {static_cast<int64_t>(v.size())}));
  }
  // A scalar with the element type of `like`. At import an intermediate's type is usually
  // unknown (no value_info): then a float constant goes through CastLike, which shape
  // inference folds once the type is known.
  Value* ScalarLike(const std::string& what, double v, Value* like) {
    if (IsSupportedDType(like->dtype) && like->dtype != DType::kBool) {
      return g_.AddConstant(n_.name + "_" + what, Tensor::Scalar(like->dtype, v));
    }
    Value* f = g_.AddConstant(n_.name + "_" + what, Tensor::Scalar(DType::kFloat32, v));
    return Before("CastLike", {f, like});
  }
  Value* Fresh(const std::string& what) { return g_.NewValue(n_.name + "_" + what); }

  // Adds `op` ahead of the rewritten node (it computes something the node reads).
  Value* Before(const std::string& op, std::vector<Value*> ins, Attrs attrs = {}) {
    Value* out = Fresh(op);
    g_.InsertNode(&n_, Make(op, std::move(ins), out, std::move(attrs)));
    return out;
  }
  // Adds `op` behind the rewritten node (and behind earlier After() nodes), writing `out`.
  void After(const std::string& op, std::vector<Value*> ins, Value* out, Attrs attrs = {}) {
    const Node* anchor = last_after_ ? last_after_ : &n_;
    Node* next = nullptr;
    const auto& nodes = g_.nodes();
    for (size_t i = 0; i + 1 < nodes.size(); ++i) {
      if (nodes[i].get() == anchor) next = nodes[i + 1].get();
    }
    last_after_ = g_.InsertNode(next, Make(op, std::move(ins), out, std::move(attrs)));
  }

 private:
  std::unique_ptr<Node> Make(const std::string& op, std::vector<Value*> ins, Value* out,
                             Attrs attrs) {
    auto node = std::make_unique<Node>();
    node->name = n_.name + "/" + op + "_" + std::to_string(count_++);
    node->op_type = op;
    node->domain = kOnnxDomain;
    node->opset = n_.opset;
    node->inputs = std::move(ins);
    node->outputs = {out};
    node->attrs = std::move(attrs);
    return node;
  }

  Graph& g_;
  Node& n_;
  Node* last_after_ = nullptr;
  int count_ = 0;
};

}  // namespace kiln::onnx_io::normalize
