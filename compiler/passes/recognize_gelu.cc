// GELU as exporters without a Gelu operator (ai.onnx < 20) write it:
//   erf form:  x * 0.5 * (1 + Erf(x / sqrt(2)))                      -> Gelu
//   tanh form: 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) -> Gelu(approximate=tanh)
// "times 0.5" may come first, last or on the (1 + t) factor; x / sqrt(2) may be a Mul by
// 1/sqrt(2); x^3 may be Pow(x, 3) or x * (x * x). Constants match within 1e-4 relative.
#include <cmath>
#include <numbers>

#include "compiler/passes/recognize_match.h"

namespace kiln::passes::recognize {
namespace {

struct GeluMatch {
  PatternMatch match;
  Value* x = nullptr;
};

// After t (the Erf or Tanh output): 1 + t, then the products with x and 0.5 in any of the
// three orders PyTorch and Hugging Face code produce. Appends the nodes and sets the output.
bool MatchGeluOuter(const Graph& graph, Value* t, Value* x, PatternMatch& m) {
  Node* add = OnlyConsumer(graph, t);
  if (!IsOnnxOp(add, "Add") || !IsScalarNear(OtherOperand(*add, t), 1.0)) return false;
  Value* a = add->output(0);
  Node* n1 = OnlyConsumer(graph, a);
  if (!n1) return false;
  m.nodes.push_back(add);
  m.nodes.push_back(n1);
  if (IsScaleOf(n1, a, 0.5)) {  // ((1 + t) * 0.5) * x
    Node* n2 = OnlyConsumer(graph, n1->output(0));
    if (!IsOnnxOp(n2, "Mul") || OtherOperand(*n2, n1->output(0)) != x) return false;
    m.nodes.push_back(n2);
    m.output = n2->output(0);
    return true;
  }
  if (!IsOnnxOp(n1, "Mul")) return false;
  Value* other = OtherOperand(*n1, a);
  if (other == x) {  // (x * (1 + t)) * 0.5: PyTorch's own export
    Node* n2 = ScaleAfter(graph, n1->output(0), 0.5);
    if (!n2) return false;
    m.nodes.push_back(n2);
    m.output = n2->output(0);
    return true;
  }
  // (x * 0.5) * (1 + t)
  Node* half = other ? other->producer : nullptr;
  if (!half || ScaledInput(half, 0.5) != x) return false;
  m.nodes.push_back(half);
  m.output = n1->output(0);
  return true;
}

std::optional<GeluMatch> MatchGeluErf(const Graph& graph, Node& erf) {
  if (!IsOnnxOp(&erf, "Erf") || !erf.input(0) || !erf.input(0)->producer) return std::nullopt;
  Node* scale = erf.input(0)->producer;
  GeluMatch m;
  m.x = ScaledInput(scale, 1.0 / std::numbers::sqrt2);
  if (!IsFloatValue(m.x)) return std::nullopt;
  m.match.nodes = {scale, &erf};
  if (!MatchGeluOuter(graph, erf.output(0), m.x, m.match)) return std::nullopt;
  if (!IsSelfContained(graph, m.match)) return std::nullopt;
  return m;
}

// x^3 as Pow(x, 3) or x * (x * x) (either order); appends the nodes on success.
bool IsCubeOf(const Value* cube, const Value* x, std::vector<Node*>& nodes) {
  Node* n = cube ? cube->producer : nullptr;
  if (IsOnnxOp(n, "Pow") && n->input(0) == x && n->input(1) && n->input(1)->constant &&
      n->input(1)->constant->numel() == 1 && n->input(1)->constant->GetDouble(0) == 3.0) {
    nodes.push_back(n);
    return true;
  }
  if (!IsOnnxOp(n, "Mul")) return false;
  Value* sq = OtherOperand(*n, x);
  Node* sq_node = sq ? sq->producer : nullptr;
  if (!IsOnnxOp(sq_node, "Mul") || sq_node->input(0) != x || sq_node->input(1) != x) return false;
  nodes.push_back(sq_node);
  nodes.push_back(n);
  return true;
}

// sqrt(2/pi) * (x + 0.044715 * x^3) feeding the Tanh; sets m.x and the inner nodes.
bool MatchTanhInner(Node& tanh, GeluMatch& m) {
  Node* outer = tanh.input(0) ? tanh.input(0)->producer : nullptr;
  Value* sum = ScaledInput(outer, std::sqrt(2.0 / std::numbers::pi));
  Node* add = sum ? sum->producer : nullptr;
  if (!IsOnnxOp(add, "Add") || add->inputs.size() != 2) return false;
  for (int i = 0; i < 2; ++i) {
    Value* x = add->input(i);
    Value* term = add->input(1 - i);
    Node* kappa = term ? term->producer : nullptr;
    Value* cube = ScaledInput(kappa, 0.044715);
    std::vector<Node*> nodes;
    if (!x || x->constant || !cube || !IsCubeOf(cube, x, nodes)) continue;
    m.x = x;
    m.match.nodes = nodes;
    m.match.nodes.insert(m.match.nodes.end(), {kappa, add, outer, &tanh});
    return true;
  }
  return false;
}

std::optional<GeluMatch> MatchGeluTanh(const Graph& graph, Node& tanh) {
  GeluMatch m;
  if (!IsOnnxOp(&tanh, "Tanh") || !MatchTanhInner(tanh, m) || !IsFloatValue(m.x)) {
    return std::nullopt;
  }
  if (!MatchGeluOuter(graph, tanh.output(0), m.x, m.match)) return std::nullopt;
  if (!IsSelfContained(graph, m.match)) return std::nullopt;
  return m;
}

void RewriteGelu(Rewriter& rw, const GeluMatch& m, const char* approximate) {
  std::unique_ptr<Node> gelu = rw.NewNode("Gelu", kOnnxDomain, 20);
  gelu->inputs = {m.x};
  gelu->attrs["approximate"] = Attribute::String(approximate);
  rw.Replace(m.match, std::move(gelu));
}

}  // namespace

bool RecognizeGeluErf(Rewriter& rw, Node& erf) {
  std::optional<GeluMatch> m = MatchGeluErf(rw.graph, erf);
  if (m) RewriteGelu(rw, *m, "none");
  return m.has_value();
}

bool RecognizeGeluTanh(Rewriter& rw, Node& tanh) {
  std::optional<GeluMatch> m = MatchGeluTanh(rw.graph, tanh);
  if (m) RewriteGelu(rw, *m, "tanh");
  return m.has_value();
}

}  // namespace kiln::passes::recognize
