// Activations written as products with x:
//   HardSwish: x * HardSigmoid(x, alpha=1/6, beta=0.5)  (PyTorch, ai.onnx < 14)
//              x * Clip(x + 3, 0, 6) / 6                 (hand-written relu6 form; the / 6
//                                                        may also come before the product)
//   SiLU:      x * Sigmoid(x) -> ai.kiln FusedElementwise [Sigmoid(x), Mul(x, r0)]
#include "compiler/passes/recognize_match.h"
#include "ir/kiln_ops.h"

namespace kiln::passes::recognize {
namespace {

struct ProductMatch {  // x * f(x): the pattern's input x and its nodes
  PatternMatch match;
  Value* x = nullptr;
};

// n is Mul(x, v) or Mul(v, x).
bool IsProductWith(const Node* n, const Value* v, const Value* x) {
  return IsOnnxOp(n, "Mul") && OtherOperand(*n, v) == x;
}

std::optional<ProductMatch> MatchHardSwishHardSigmoid(const Graph& graph, Node& hs) {
  ProductMatch m;
  m.x = hs.input(0);
  if (!IsOnnxOp(&hs, "HardSigmoid") || !IsFloatValue(m.x)) return std::nullopt;
  if (!IsNear(hs.GetFloat("alpha", 0.2f), 1.0 / 6.0) || !IsNear(hs.GetFloat("beta", 0.5f), 0.5)) {
    return std::nullopt;
  }
  Node* mul = OnlyConsumer(graph, hs.output(0));
  if (!IsProductWith(mul, hs.output(0), m.x)) return std::nullopt;
  m.match.nodes = {&hs, mul};
  m.match.output = mul->output(0);
  return m;
}

// Clip(x + 3, 0, 6) with constant bounds; sets m.x and the first two nodes.
bool MatchRelu6OfXPlus3(Node& clip, ProductMatch& m) {
  Node* add = clip.input(0) ? clip.input(0)->producer : nullptr;
  if (!IsOnnxOp(add, "Add") || add->inputs.size() != 2) return false;
  std::optional<double> lo = ScalarOf(clip.input(1));
  if (!lo || *lo != 0.0 || !IsScalarNear(clip.input(2), 6.0)) return false;
  for (Value* x : add->inputs) {
    if (x && !x->constant && IsScalarNear(OtherOperand(*add, x), 3.0)) m.x = x;
  }
  m.match.nodes = {add, &clip};
  return IsFloatValue(m.x);
}

std::optional<ProductMatch> MatchHardSwishClip(const Graph& graph, Node& clip) {
  ProductMatch m;
  if (!IsOnnxOp(&clip, "Clip") || !MatchRelu6OfXPlus3(clip, m)) return std::nullopt;
  Value* r = clip.output(0);
  Node* n1 = OnlyConsumer(graph, r);
  Node* n2 = nullptr;
  if (IsProductWith(n1, r, m.x)) {  // (x * relu6) / 6
    n2 = ScaleAfter(graph, n1->output(0), 1.0 / 6.0);
  } else if (n1 && IsScaleOf(n1, r, 1.0 / 6.0)) {  // x * (relu6 / 6)
    n2 = OnlyConsumer(graph, n1->output(0));
    if (!IsProductWith(n2, n1->output(0), m.x)) n2 = nullptr;
  }
  if (!n2) return std::nullopt;
  m.match.nodes.insert(m.match.nodes.end(), {n1, n2});
  m.match.output = n2->output(0);
  return m;
}

// Conv/Gemm/MatMul + Sigmoid + Mul is left to the epilogue fusions, which know it as SiLU
// and run it inside the primary's kernel; a FusedElementwise there would hide it. A
// BatchNormalization between them (EfficientNet's Conv -> BN -> SiLU) is seen through:
// fold_batchnorm, later, makes it part of the Conv.
bool FeedsAnEpilogue(const Value* x) {
  const Node* p = x->producer;
  while (p && p->domain.empty() && p->op_type == "BatchNormalization" && p->input(0)) {
    p = p->input(0)->producer;
  }
  return p && p->domain.empty() &&
         (p->op_type == "Conv" || p->op_type == "Gemm" || p->op_type == "MatMul");
}

std::optional<ProductMatch> MatchSilu(const Graph& graph, Node& sig) {
  ProductMatch m;
  m.x = sig.input(0);
  if (!IsOnnxOp(&sig, "Sigmoid") || !IsFloatValue(m.x) || FeedsAnEpilogue(m.x)) {
    return std::nullopt;
  }
  Node* mul = OnlyConsumer(graph, sig.output(0));
  if (!IsProductWith(mul, sig.output(0), m.x)) return std::nullopt;
  m.match.nodes = {&sig, mul};
  m.match.output = mul->output(0);
  return m;
}

bool RewriteHardSwish(Rewriter& rw, const std::optional<ProductMatch>& m) {
  if (!m || !IsSelfContained(rw.graph, m->match)) return false;
  std::unique_ptr<Node> hs = rw.NewNode("HardSwish", kOnnxDomain, 14);
  hs->inputs = {m->x};
  rw.Replace(m->match, std::move(hs));
  return true;
}

}  // namespace

bool RecognizeHardSwishFromHardSigmoid(Rewriter& rw, Node& hard_sigmoid) {
  return RewriteHardSwish(rw, MatchHardSwishHardSigmoid(rw.graph, hard_sigmoid));
}

bool RecognizeHardSwishFromClip(Rewriter& rw, Node& clip) {
  return RewriteHardSwish(rw, MatchHardSwishClip(rw.graph, clip));
}

bool RecognizeSilu(Rewriter& rw, Node& sigmoid) {
  std::optional<ProductMatch> m = MatchSilu(rw.graph, sigmoid);
  if (!m || !IsSelfContained(rw.graph, m->match)) return false;
  std::unique_ptr<Node> fused = rw.NewNode(kiln_ops::kFusedElementwise, kKilnDomain, 1);
  fused->inputs = {m->x};
  kiln_ops::Program program;
  program.dtype = m->x->dtype;
  // Operand 0 is input x; operand 1 (= #inputs + 0) is the Sigmoid's result.
  program.instructions.push_back({"Sigmoid", {0}, {}});
  program.instructions.push_back({"Mul", {0, 1}, {}});
  kiln_ops::WriteProgram(*fused, program);
  rw.Replace(m->match, std::move(fused));
  return true;
}

}  // namespace kiln::passes::recognize
