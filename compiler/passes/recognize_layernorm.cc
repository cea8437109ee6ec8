// LayerNormalization as PyTorch (opset < 17) exports it:
//   mean = ReduceMean(x, axes=trailing k)   d = Sub(x, mean)
//   var  = ReduceMean(Pow(d, 2), same axes) y = Div(d, Sqrt(Add(var, eps)))
//   [y = Mul(y, gamma)] [y = Add(y, beta)]
// becomes LayerNormalization(x, gamma, beta, axis=-k, epsilon=eps).
#include <algorithm>

#include "compiler/passes/recognize_match.h"

namespace kiln::passes::recognize {
namespace {

struct LayerNormMatch {
  PatternMatch match;
  Value* x = nullptr;
  int64_t k = 0;              // number of trailing axes normalized
  std::vector<int64_t> norm;  // their static sizes
  double epsilon = 0.0;
  const Value* gamma = nullptr;  // constants broadcastable to `norm`, or null
  const Value* beta = nullptr;
};

// The number k of reduced axes when a keepdims ReduceMean reduces exactly the last k axes of
// a rank-`rank` input. Axes come as the opset-18 input (what the importer normalizes to) or,
// from older builders, as the attribute.
std::optional<int64_t> TrailingAxes(const Node& rm, int64_t rank) {
  if (rm.GetInt("keepdims", 1) != 1) return std::nullopt;
  std::vector<int64_t> axes;
  if (const Value* a = rm.input(1)) {
    if (!a->constant) return std::nullopt;
    axes = a->constant->ToInt64Vector();
  } else {
    axes = rm.GetInts("axes");
  }
  if (axes.empty()) return std::nullopt;  // empty means "all axes" or "none": not a layer norm
  for (int64_t& a : axes) a = a < 0 ? a + rank : a;
  std::sort(axes.begin(), axes.end());
  const int64_t k = static_cast<int64_t>(axes.size());
  for (int64_t i = 0; i < k; ++i) {
    if (axes[i] != rank - k + i) return std::nullopt;
  }
  return k;
}

// A constant of x's dtype that broadcasts onto x along the normalized axes only (so the
// Mul/Add keeps x's shape and the parameter is one value per normalized element).
bool IsNormParam(const Value* p, const LayerNormMatch& m) {
  if (!p || !p->constant || p->dtype != m.x->dtype) return false;
  const std::vector<int64_t>& dims = p->constant->shape();
  const int64_t rank = static_cast<int64_t>(m.x->shape->size());
  const int64_t q = static_cast<int64_t>(dims.size());
  if (q > rank) return false;
  for (int64_t i = 0; i < q; ++i) {
    const int64_t axis = rank - q + i;
    if (dims[i] == 1) continue;
    if (axis < rank - m.k || dims[i] != m.norm[axis - (rank - m.k)]) return false;
  }
  return true;
}

// Matches Sub -> {Pow, Div} ... Sqrt -> Div after `mean`; fills the match up to the Div.
bool MatchNormalize(const Graph& graph, Node& mean, LayerNormMatch& m) {
  Node* sub = OnlyConsumer(graph, mean.output(0));
  if (!IsOnnxOp(sub, "Sub") || sub->input(0) != m.x || sub->input(1) != mean.output(0)) {
    return false;
  }
  Value* d = sub->output(0);
  std::vector<Node*> users = graph.Consumers(d);
  if (users.size() != 2 || graph.IsGraphOutput(d)) return false;
  Node* div = IsOnnxOp(users[0], "Div") ? users[0] : users[1];
  Node* sq = div == users[0] ? users[1] : users[0];
  const bool is_square =
      (IsOnnxOp(sq, "Pow") && sq->input(0) == d && sq->input(1) && sq->input(1)->constant &&
       sq->input(1)->constant->numel() == 1 && sq->input(1)->constant->GetDouble(0) == 2.0) ||
      (IsOnnxOp(sq, "Mul") && sq->input(0) == d && sq->input(1) == d);
  if (!IsOnnxOp(div, "Div") || div->input(0) != d || !is_square) return false;
  Node* var = OnlyConsumer(graph, sq->output(0));
  if (!IsOnnxOp(var, "ReduceMean") || var->input(0) != sq->output(0) ||
      TrailingAxes(*var, static_cast<int64_t>(m.x->shape->size())) != m.k) {
    return false;
  }
  Node* add = OnlyConsumer(graph, var->output(0));
  std::optional<double> eps =
      add && IsOnnxOp(add, "Add") ? ScalarOf(OtherOperand(*add, var->output(0))) : std::nullopt;
  Node* sqrt = eps ? OnlyConsumer(graph, add->output(0)) : nullptr;
  if (!IsOnnxOp(sqrt, "Sqrt") || OnlyConsumer(graph, sqrt->output(0)) != div ||
      div->input(1) != sqrt->output(0)) {
    return false;
  }
  m.epsilon = *eps;
  m.match.nodes = {&mean, sub, sq, var, add, sqrt, div};
  m.match.output = div->output(0);
  return true;
}

// The optional Mul(gamma) and Add(beta) after the normalization.
void MatchAffine(const Graph& graph, LayerNormMatch& m) {
  Node* mul = OnlyConsumer(graph, m.match.output);
  if (IsOnnxOp(mul, "Mul") && IsNormParam(OtherOperand(*mul, m.match.output), m)) {
    m.gamma = OtherOperand(*mul, m.match.output);
    m.match.nodes.push_back(mul);
    m.match.output = mul->output(0);
  }
  Node* add = OnlyConsumer(graph, m.match.output);
  if (IsOnnxOp(add, "Add") && IsNormParam(OtherOperand(*add, m.match.output), m)) {
    m.beta = OtherOperand(*add, m.match.output);
    m.match.nodes.push_back(add);
    m.match.output = add->output(0);
  }
}

std::optional<LayerNormMatch> MatchLayerNorm(const Graph& graph, Node& mean) {
  LayerNormMatch m;
  m.x = mean.input(0);
  if (!IsOnnxOp(&mean, "ReduceMean") || !IsFloatValue(m.x) || !m.x->shape) return std::nullopt;
  const Shape& shape = *m.x->shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::optional<int64_t> k = TrailingAxes(mean, rank);
  if (!k) return std::nullopt;
  m.k = *k;
  // The parameters are materialized at the normalized shape, so it must be known.
  for (int64_t i = rank - m.k; i < rank; ++i) {
    if (!shape[i].known()) return std::nullopt;
    m.norm.push_back(shape[i].value);
  }
  if (!MatchNormalize(graph, mean, m)) return std::nullopt;
  MatchAffine(graph, m);
  if (!IsSelfContained(graph, m.match)) return std::nullopt;
  return m;
}

// `p` (broadcastable to `norm`, see IsNormParam) expanded to exactly `norm`; `fill` when
// absent. Scale and B of exactly the normalized shape are what every runtime accepts.
Tensor ExpandParam(const Value* p, const std::vector<int64_t>& norm, DType dtype, double fill) {
  Tensor out(dtype, norm);
  const int64_t k = static_cast<int64_t>(norm.size());
  std::vector<int64_t> dims(k, 1);  // p's dims right-aligned onto norm (leading ones dropped)
  if (p) {
    const std::vector<int64_t>& pd = p->constant->shape();
    for (int64_t i = 0; i < k && i < static_cast<int64_t>(pd.size()); ++i) {
      dims[k - 1 - i] = pd[pd.size() - 1 - i];
    }
  }
  for (int64_t flat = 0; flat < out.numel(); ++flat) {
    int64_t rest = flat, src = 0, stride = 1;
    for (int64_t a = k - 1; a >= 0; --a) {
      const int64_t idx = rest % norm[a];
      rest /= norm[a];
      if (dims[a] != 1) src += idx * stride;
      stride *= dims[a];
    }
    out.SetDouble(flat, p ? p->constant->GetDouble(src) : fill);
  }
  return out;
}

}  // namespace

bool RecognizeLayerNorm(Rewriter& rw, Node& reduce_mean) {
  std::optional<LayerNormMatch> m = MatchLayerNorm(rw.graph, reduce_mean);
  if (!m) return false;
  const DType dtype = m->x->dtype;
  const std::string& base = m->match.output->name;
  Value* scale = rw.graph.AddConstant(base + "_ln_scale", ExpandParam(m->gamma, m->norm, dtype, 1));
  Value* bias = rw.graph.AddConstant(base + "_ln_bias", ExpandParam(m->beta, m->norm, dtype, 0));
  std::unique_ptr<Node> ln = rw.NewNode("LayerNormalization", kOnnxDomain, 17);
  ln->inputs = {m->x, scale, bias};
  ln->attrs["axis"] = Attribute::Int(-m->k);
  ln->attrs["epsilon"] = Attribute::Float(static_cast<float>(m->epsilon));
  rw.Replace(m->match, std::move(ln));
  return true;
}

}  // namespace kiln::passes::recognize
