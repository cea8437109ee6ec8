// Internals of recognize_patterns: the helpers its matchers share and one Match/Rewrite pair
// per pattern (recognize_layernorm.cc, recognize_gelu.cc, recognize_activations.cc). Not a
// public API: only recognize_patterns.cc and these files include it.
//
// Every matcher takes the node its pattern is anchored at (ReduceMean, Erf, Tanh,
// HardSigmoid, Clip, Sigmoid), checks the whole pattern without touching the graph, and
// returns the nodes it would swallow plus what the replacement needs; the rewrite then cannot
// fail halfway.
#pragma once

#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"

namespace kiln::passes::recognize {

// The nodes a pattern swallows and the value its replacement produces (the last node's).
struct PatternMatch {
  std::vector<Node*> nodes;
  Value* output = nullptr;
};

// Rewrites go through this so the driver can skip anchors a rewrite removed.
struct Rewriter {
  Graph& graph;
  std::unordered_set<const Node*> removed;

  // A fresh ai.onnx node named after the match's output, at the graph's ai.onnx version (at
  // least `min_opset`, the version that introduced the operator).
  std::unique_ptr<Node> NewNode(const std::string& op_type, const std::string& domain,
                                int64_t min_opset) const;
  // Puts `replacement` where the match's last node was (its inputs are the pattern's inputs
  // and constants, all defined by then), removes the matched nodes, and makes it the producer
  // of the match's output.
  Node* Replace(const PatternMatch& m, std::unique_ptr<Node> replacement);
};

bool IsOnnxOp(const Node* n, const char* op);
// The node that reads v, when it is the only one and v is not a graph output.
Node* OnlyConsumer(const Graph& graph, const Value* v);
// The other operand of a two-input node that reads v; nullptr when it does not read v.
Value* OtherOperand(const Node& n, const Value* v);
// The value of a one-element float constant.
std::optional<double> ScalarOf(const Value* v);
// A one-element constant within 1e-4 relative of `want` (exporters round 1/sqrt(2) & co.).
bool IsScalarNear(const Value* v, double want);
bool IsNear(double got, double want);
bool IsFloatValue(const Value* v);
// Every value the match's nodes produce, except its output, is read only inside the match
// and is not a graph output (a value with an outside reader must stay computed).
bool IsSelfContained(const Graph& graph, const PatternMatch& m);
// n is Mul(v, c) or Div(v, 1/c) with a scalar constant c near `factor` (either Mul order):
// the ways exporters write "times factor".
bool IsScaleOf(const Node* n, const Value* v, double factor);
// The node after v that scales it by `factor` (see IsScaleOf), when it is v's only consumer.
Node* ScaleAfter(const Graph& graph, const Value* v, double factor);
// The value v that node n scales by `factor` (IsScaleOf(n, v, factor)), or nullptr.
Value* ScaledInput(const Node* n, double factor);

// Each Recognize* returns true when it rewrote the pattern anchored at `anchor`.
bool RecognizeLayerNorm(Rewriter& rw, Node& reduce_mean);
bool RecognizeGeluErf(Rewriter& rw, Node& erf);
bool RecognizeGeluTanh(Rewriter& rw, Node& tanh);
bool RecognizeHardSwishFromHardSigmoid(Rewriter& rw, Node& hard_sigmoid);
bool RecognizeHardSwishFromClip(Rewriter& rw, Node& clip);
bool RecognizeSilu(Rewriter& rw, Node& sigmoid);

}  // namespace kiln::passes::recognize
