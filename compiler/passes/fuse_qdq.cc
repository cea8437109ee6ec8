#include "compiler/passes/fuse_qdq.h"

#include <cmath>
#include <limits>
#include <optional>
#include <utility>

namespace kiln::passes {
namespace {

bool IsOnnx(const Node* n, const char* op) { return n && n->domain.empty() && n->op_type == op; }

bool IsByteInt(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

const Tensor* ConstOf(const Value* v) { return v && v->constant ? &*v->constant : nullptr; }

// A DequantizeLinear with constant float32 scale (and zero point, if any).
struct Dequant {
  Node* node = nullptr;
  Value* q = nullptr;             // the quantized operand
  const Tensor* scale = nullptr;  // float32, numel 1 or one per slice along `axis`
  const Tensor* zero = nullptr;   // nullptr: zero
  int64_t axis = 1;
};

std::optional<Dequant> AsDequant(const Value* v) {
  Node* n = v ? v->producer : nullptr;
  if (!IsOnnx(n, "DequantizeLinear") || n->GetInt("block_size", 0) != 0) return std::nullopt;
  Dequant d{n, n->input(0), ConstOf(n->input(1)), ConstOf(n->input(2)), n->GetInt("axis", 1)};
  if (!d.q || !d.scale || d.scale->dtype() != DType::kFloat32) return std::nullopt;
  if (n->input(2) && !d.zero) return std::nullopt;
  return d;
}

// The activation operand: per-tensor int8/uint8.
bool IsPerTensorActivation(const Dequant& d) {
  return IsByteInt(d.q->dtype) && d.scale->numel() == 1 && (!d.zero || d.zero->numel() == 1) &&
         (!d.zero || d.zero->dtype() == d.q->dtype);
}

// Constant int8 weights of rank `rank` (0: 3 or more, a Conv's) with zero point 0 and one scale
// or one per output channel, which lies along `axis` (0 for Conv, 1 for a MatMul's [K, N]).
bool IsSymmetricWeight(const Dequant& d, int rank, int64_t axis) {
  const Tensor* w = ConstOf(d.q);
  if (!w || w->dtype() != DType::kInt8 || (rank ? w->rank() != rank : w->rank() < 3)) return false;
  const int64_t n = d.scale->numel();
  if (n != 1 && !(n == w->dim(axis) && d.scale->rank() == 1 &&
                  (d.axis == axis || d.axis == axis - w->rank()))) {
    return false;
  }
  for (int64_t i = 0; d.zero && i < d.zero->numel(); ++i) {
    if (d.zero->GetDouble(i) != 0.0) return false;
  }
  return true;
}

// The single reader of `v`, or nullptr (none, several, or v is a graph output).
Node* SoleReader(const Graph& graph, const Value* v) {
  if (graph.IsGraphOutput(v)) return nullptr;
  std::vector<Node*> readers = graph.Consumers(v);
  return readers.size() == 1 ? readers[0] : nullptr;
}

// The per-tensor QuantizeLinear the Conv's or MatMul's result (through an optional Relu or
// Clip) ends in.
struct Requant {
  Node* clamp = nullptr;  // the Relu or Clip between the Conv and the Q
  Node* q = nullptr;
};

// The [lo, hi] a Relu or a Clip with constant bounds keeps; nullopt for anything else.
std::optional<std::pair<double, double>> ClampRange(const Node* n) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (IsOnnx(n, "Relu")) return std::make_pair(0.0, kInf);
  if (!IsOnnx(n, "Clip")) return std::nullopt;
  std::pair<double, double> r(-kInf, kInf);
  for (size_t i : {1, 2}) {
    if (!n->input(i)) continue;
    const Tensor* t = ConstOf(n->input(i));
    if (!t || t->numel() != 1) return std::nullopt;
    (i == 1 ? r.first : r.second) = t->GetDouble(0);
  }
  return r;
}

// Whether clamping to [lo, hi] before Q changes nothing: Q is monotonic, so
// Q(clamp(v, lo, hi)) = clamp(Q(v), Q(lo), Q(hi)), which is Q(v) when Q(lo) and Q(hi)
// saturate to the type's ends.
bool ClampIsImplied(std::pair<double, double> range, double scale, double zero, DType type) {
  const double lowest = type == DType::kInt8 ? -128.0 : 0.0, highest = lowest + 255.0;
  auto q = [&](double v) { return std::nearbyint(v / scale) + zero; };
  const bool lo_ok = range.first == -std::numeric_limits<double>::infinity() ||
                     q(range.first) <= lowest;
  const bool hi_ok = range.second == std::numeric_limits<double>::infinity() ||
                     q(range.second) >= highest;
  return lo_ok && hi_ok;
}

std::optional<Requant> FindRequant(const Graph& graph, const Node& producer) {
  Requant r;
  Node* next = SoleReader(graph, producer.output(0));
  std::optional<std::pair<double, double>> range = ClampRange(next);
  if (range && next->input(0) == producer.output(0)) {
    r.clamp = next;
    next = SoleReader(graph, next->output(0));
  }
  if (!IsOnnx(next, "QuantizeLinear") ||
      next->input(0) != (r.clamp ? r.clamp : &producer)->output(0)) {
    return std::nullopt;
  }
  const Tensor* s = ConstOf(next->input(1));
  const Tensor* z = ConstOf(next->input(2));
  const Value* y = next->output(0);
  if (!s || s->dtype() != DType::kFloat32 || s->numel() != 1 || !(s->GetDouble(0) > 0)) {
    return std::nullopt;
  }
  if ((next->input(2) && (!z || z->numel() != 1)) || !y || !IsByteInt(y->dtype)) {
    return std::nullopt;
  }
  if (next->GetInt("block_size", 0) != 0) return std::nullopt;
  if (r.clamp && !ClampIsImplied(*range, s->GetDouble(0), z ? z->GetDouble(0) : 0.0, y->dtype)) {
    return std::nullopt;
  }
  r.q = next;
  return r;
}

// The float values of a per-channel bias: a constant, or DQ of a constant. nullopt for
// anything else.
std::optional<std::vector<double>> BiasValues(const Value* b, int64_t out_channels) {
  std::vector<double> values(out_channels, 0.0);
  if (!b) return values;
  if (const Tensor* t = ConstOf(b)) {
    if (t->numel() != out_channels) return std::nullopt;
    for (int64_t c = 0; c < out_channels; ++c) values[c] = t->GetDouble(c);
    return values;
  }
  std::optional<Dequant> d = AsDequant(b);
  const Tensor* q = d ? ConstOf(d->q) : nullptr;
  if (!q || q->numel() != out_channels) return std::nullopt;
  auto at = [&](const Tensor* t, int64_t c) { return t->GetDouble(t->numel() == 1 ? 0 : c); };
  if (d->scale->numel() != 1 && d->scale->numel() != out_channels) return std::nullopt;
  if (d->zero && d->zero->numel() != 1 && d->zero->numel() != out_channels) return std::nullopt;
  for (int64_t c = 0; c < out_channels; ++c) {
    values[c] = (q->GetDouble(c) - (d->zero ? at(d->zero, c) : 0.0)) * at(d->scale, c);
  }
  return values;
}

// The bias in accumulator units, round(b / (sx * sw[c])), int32; nullopt when a value does
// not fit.
std::optional<Tensor> AccumulatorBias(const std::vector<double>& values, const Dequant& x,
                                      const Dequant& w) {
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor out(DType::kInt32, {n});
  const float sx = static_cast<float>(x.scale->GetDouble(0));
  for (int64_t c = 0; c < n; ++c) {
    // The accumulator's scale as float32 arithmetic gives it (exporters write sx * sw so).
    const float acc_scale =
        sx * static_cast<float>(w.scale->GetDouble(w.scale->numel() == 1 ? 0 : c));
    if (!(acc_scale > 0)) return std::nullopt;
    const double q = std::nearbyint(values[c] / acc_scale);
    if (!(std::fabs(q) <= std::numeric_limits<int32_t>::max())) return std::nullopt;
    out.SetInt(c, static_cast<int64_t>(q));
  }
  return out;
}

Value* ZeroPoint(Graph& graph, const std::string& hint, const Tensor* zero, DType dtype,
                 std::vector<int64_t> shape) {
  if (zero) {
    Tensor z(dtype, zero->shape());
    for (int64_t i = 0; i < zero->numel(); ++i) z.SetInt(i, static_cast<int64_t>(zero->GetDouble(i)));
    return graph.AddConstant(hint, std::move(z));
  }
  return graph.AddConstant(hint, Tensor(dtype, std::move(shape)));
}

// Removes a DequantizeLinear nobody reads any more.
void DropIfUnread(Graph& graph, Node* dq) {
  if (dq && graph.Consumers(dq->output(0)).empty() && !graph.IsGraphOutput(dq->output(0))) {
    graph.RemoveNode(dq);
  }
}

// Replaces `op` (the Conv or MatMul), its Relu/Clip and its Q by `qlinear_op` (QLinearConv
// or QLinearMatMul, whose first eight inputs are alike) computing the Q's output, `bias`
// appended when given; drops the DequantizeLinears nobody reads any more.
void ReplaceWithQLinear(Graph& graph, Node& op, const char* qlinear_op, const Dequant& x,
                        const Dequant& w, const Requant& r, Value* bias) {
  const std::string& base = op.name;
  Value* y = r.q->output(0);
  auto node = std::make_unique<Node>();
  node->op_type = qlinear_op;
  node->name = base + "_qlinear";
  node->opset = op.opset;
  if (op.op_type == "Conv") node->attrs = op.attrs;  // QLinearConv takes Conv's attributes
  node->inputs = {x.q,
                  x.node->inputs[1],
                  ZeroPoint(graph, base + "_x_zero_point", x.zero, x.q->dtype, {}),
                  w.q,
                  w.node->inputs[1],
                  graph.AddConstant(base + "_w_zero_point", Tensor(DType::kInt8, w.scale->shape())),
                  r.q->inputs[1],
                  ZeroPoint(graph, base + "_y_zero_point",
                            r.q->input(2) ? ConstOf(r.q->input(2)) : nullptr, y->dtype, {})};
  if (bias) node->inputs.push_back(bias);
  node->outputs = {y};
  r.q->outputs = {nullptr};
  graph.InsertNode(r.q, std::move(node));
  graph.RemoveNode(r.q);
  if (r.clamp) graph.RemoveNode(r.clamp);
  graph.RemoveNode(&op);
  for (Node* dq : {x.node, w.node}) DropIfUnread(graph, dq);
}

bool FuseConv(Graph& graph, Node& conv) {
  std::optional<Dequant> x = AsDequant(conv.input(0));
  std::optional<Dequant> w = AsDequant(conv.input(1));
  if (!x || !w || !IsPerTensorActivation(*x)) return false;
  if (!IsSymmetricWeight(*w, 0, 0)) return false;
  const int64_t oc = ConstOf(w->q)->dim(0);
  std::optional<Requant> r = FindRequant(graph, conv);
  if (!r) return false;
  std::optional<std::vector<double>> bias_values = BiasValues(conv.input(2), oc);
  std::optional<Tensor> bias = bias_values ? AccumulatorBias(*bias_values, *x, *w) : std::nullopt;
  if (!bias) return false;

  Node* dq_b = conv.input(2) ? conv.input(2)->producer : nullptr;
  Value* b = graph.AddConstant(conv.name + "_bias_int32", std::move(*bias));
  ReplaceWithQLinear(graph, conv, "QLinearConv", *x, *w, *r, b);
  DropIfUnread(graph, IsOnnx(dq_b, "DequantizeLinear") ? dq_b : nullptr);
  return true;
}

// DQ(aq, sa, za) -> MatMul(., DQ(bq, sb, 0)) [-> Relu | Clip] -> Q(sy, zy) becomes
// QLinearMatMul(aq, sa, za, bq, sb, 0, sy, zy).
bool FuseMatMul(Graph& graph, Node& matmul) {
  std::optional<Dequant> a = AsDequant(matmul.input(0));
  std::optional<Dequant> b = AsDequant(matmul.input(1));
  if (!a || !b || !IsPerTensorActivation(*a) || !IsSymmetricWeight(*b, 2, 1)) return false;
  std::optional<Requant> r = FindRequant(graph, matmul);
  if (!r) return false;
  ReplaceWithQLinear(graph, matmul, "QLinearMatMul", *a, *b, *r, nullptr);
  return true;
}

bool SameScalar(const Tensor* a, const Tensor* b) {
  const double va = a ? a->GetDouble(0) : 0.0, vb = b ? b->GetDouble(0) : 0.0;
  return va == vb;
}

// DQ(xq, s, z) -> MaxPool -> Q(s, z) is MaxPool(xq): Q(DQ(q)) = q for one (s, z), and max
// commutes with the monotonic dequantization.
bool FuseMaxPool(Graph& graph, Node& pool) {
  std::optional<Dequant> x = AsDequant(pool.input(0));
  if (!x || !IsPerTensorActivation(*x) || pool.output(1)) return false;
  Node* q = SoleReader(graph, pool.output(0));
  if (!IsOnnx(q, "QuantizeLinear") || !q->output(0) || q->output(0)->dtype != x->q->dtype) {
    return false;
  }
  const Tensor* s = ConstOf(q->input(1));
  const Tensor* z = ConstOf(q->input(2));
  if (!s || s->numel() != 1 || (q->input(2) && (!z || z->numel() != 1)) ||
      s->dtype() != DType::kFloat32 || !SameScalar(s, x->scale) || !SameScalar(z, x->zero)) {
    return false;
  }
  Value* y = q->output(0);
  q->outputs = {nullptr};
  graph.RemoveNode(q);
  pool.inputs[0] = x->q;
  pool.outputs[0]->producer = nullptr;
  pool.outputs[0] = y;
  y->producer = &pool;
  DropIfUnread(graph, x->node);
  return true;
}

}  // namespace

absl::StatusOr<bool> FuseQdq(Graph& graph) {
  std::vector<Node*> convs, matmuls, pools;
  for (const auto& n : graph.nodes()) {
    if (IsOnnx(n.get(), "Conv")) convs.push_back(n.get());
    if (IsOnnx(n.get(), "MatMul")) matmuls.push_back(n.get());
    if (IsOnnx(n.get(), "MaxPool")) pools.push_back(n.get());
  }
  bool changed = false;
  for (Node* conv : convs) changed = FuseConv(graph, *conv) || changed;
  for (Node* m : matmuls) changed = FuseMatMul(graph, *m) || changed;
  for (Node* pool : pools) changed = FuseMaxPool(graph, *pool) || changed;
  if (changed) graph.PruneUnusedValues();
  return changed;
}

}  // namespace kiln::passes
