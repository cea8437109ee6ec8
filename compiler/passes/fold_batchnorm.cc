#include "compiler/passes/fold_batchnorm.h"

#include <cmath>
#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/passes/node_key.h"
#include "compiler/passes/weight_arena.h"
#include "ir/graph_edit.h"

namespace kiln::passes {
namespace {

// What the folds of one pass run share. The readers of each value are counted once: a fold
// never changes the count of a value another BatchNorm asks about (it removes a BatchNorm
// that was its input's only reader, or puts a Mul in its place as that input's reader), and
// counting per BatchNorm walked the whole graph each time. Insertions and removals are
// applied in one edit at the end.
struct FoldContext {
  Graph& graph;
  FoldCache* cache;
  WeightArena arena;
  std::unordered_map<const Value*, size_t> readers;  // distinct reader nodes
  std::unordered_set<const Value*> outputs;
  std::vector<std::pair<Node*, std::unique_ptr<Node>>> inserted;
  std::vector<Node*> removed;

  FoldContext(Graph& g, FoldCache* c, size_t arena_bytes)
      : graph(g), cache(c), arena(arena_bytes), outputs(g.outputs.begin(), g.outputs.end()) {
    for (const auto& n : g.nodes()) {
      std::unordered_set<const Value*> seen;
      for (const Value* in : n->inputs) {
        if (in && seen.insert(in).second) ++readers[in];
      }
    }
  }
  bool Unread(const Value* v) const { return !readers.count(v) && !outputs.count(v); }
};

struct Affine {
  std::vector<double> scale, shift;  // per channel
};

bool IsConstFloat(const Value* v) {
  return v && v->constant && IsFloatDType(v->dtype);
}

// The per-channel affine map of an inference-mode BatchNormalization, if it is one.
std::optional<Affine> BatchNormAffine(const FoldContext& ctx, const Node& bn) {
  if (bn.op_type != "BatchNormalization" || !bn.domain.empty()) return std::nullopt;
  if (bn.GetInt("training_mode", 0) != 0) return std::nullopt;
  for (size_t i = 1; i < bn.outputs.size(); ++i) {
    Value* o = bn.outputs[i];
    if (o && !ctx.Unread(o)) return std::nullopt;
  }
  for (size_t i = 1; i <= 4; ++i) {
    if (!IsConstFloat(bn.input(i))) return std::nullopt;
  }
  const Tensor &g = *bn.input(1)->constant, &b = *bn.input(2)->constant,
               &m = *bn.input(3)->constant, &v = *bn.input(4)->constant;
  const int64_t c = g.numel();
  if (b.numel() != c || m.numel() != c || v.numel() != c) return std::nullopt;
  const double eps = bn.GetFloat("epsilon", 1e-5f);
  Affine a;
  for (int64_t i = 0; i < c; ++i) {
    double s = g.GetDouble(i) / std::sqrt(v.GetDouble(i) + eps);
    a.scale.push_back(s);
    a.shift.push_back(b.GetDouble(i) - m.GetDouble(i) * s);
  }
  return a;
}

// Scales a weight tensor along its output-channel axis into uninitialized arena memory, one
// write per element. `channel_of(flat index)` maps an element to its channel.
template <class ChannelOf>
Tensor ScaleWeights(const Tensor& w, const Affine& a, WeightArena& arena, ChannelOf channel_of) {
  Tensor out = arena.Take(w.dtype(), w.shape());
  if (w.dtype() == DType::kFloat32) {  // the common case, without per-element dispatch
    const float* src = w.data<float>();
    float* dst = out.mutable_data<float>();
    for (int64_t i = 0; i < w.numel(); ++i) {
      dst[i] = static_cast<float>(src[i] * a.scale[channel_of(i)]);
    }
    return out;
  }
  for (int64_t i = 0; i < w.numel(); ++i) out.SetDouble(i, w.GetDouble(i) * a.scale[channel_of(i)]);
  return out;
}

// The same when each channel is one run of `per_channel` elements (Conv: W is [M, ...]).
Tensor ScaleRows(const Tensor& w, const Affine& a, WeightArena& arena, int64_t per_channel) {
  if (w.dtype() != DType::kFloat32) {
    return ScaleWeights(w, a, arena, [per_channel](int64_t i) { return i / per_channel; });
  }
  Tensor out = arena.Take(w.dtype(), w.shape());
  const float* src = w.data<float>();
  float* dst = out.mutable_data<float>();
  for (size_t c = 0; c < a.scale.size(); ++c) {
    const double s = a.scale[c];
    for (int64_t j = 0; j < per_channel; ++j, ++src, ++dst) *dst = static_cast<float>(*src * s);
  }
  return out;
}

Tensor FoldBias(const Tensor* bias, const Affine& a, DType dtype, double bias_scale = 1.0) {
  const int64_t c = static_cast<int64_t>(a.scale.size());
  Tensor out(dtype, {c});
  for (int64_t i = 0; i < c; ++i) {
    double b = bias ? bias->GetDouble(bias->numel() == 1 ? 0 : i) * bias_scale : 0.0;
    out.SetDouble(i, b * a.scale[i] + a.shift[i]);
  }
  return out;
}

// Output channels of a Conv (W: [M, C/g, k...]) or ConvTranspose (W: [C, M/g, k...]).
std::optional<Tensor> ConvWeights(const Node& conv, const Tensor& w, const Affine& a,
                                  WeightArena& arena) {
  const int64_t c = static_cast<int64_t>(a.scale.size());
  if (w.rank() < 3) return std::nullopt;
  const int64_t inner = NumElements(std::vector<int64_t>(w.shape().begin() + 2, w.shape().end()));
  if (conv.op_type == "Conv") {
    if (w.dim(0) != c) return std::nullopt;
    return ScaleRows(w, a, arena, c == 0 ? 0 : w.numel() / c);
  }
  const int64_t group = conv.GetInt("group", 1);
  const int64_t m_per_g = w.dim(1);
  if (m_per_g * group != c || w.dim(0) % group != 0) return std::nullopt;
  const int64_t c_per_g = w.dim(0) / group;
  return ScaleWeights(w, a, arena, [=](int64_t i) {
    int64_t j = (i / inner) % m_per_g, ic = i / (inner * m_per_g);
    return (ic / c_per_g) * m_per_g + j;
  });
}

// The tensors `make` derives from the producer's constant inputs and BatchNorm `bn`'s
// parameters: computed once per model when its buckets' compiles share a cache (each bucket
// has its own graph, over the same weight buffers).
std::vector<Tensor> Derived(const Node& producer, const Node& bn, FoldCache* cache,
                            const std::function<std::vector<Tensor>()>& make) {
  if (!cache) return make();
  std::vector<const Tensor*> inputs;
  for (const Node* n : {&producer, &bn}) {
    for (size_t i = 1; i < n->inputs.size(); ++i) {
      inputs.push_back(n->input(i) && n->input(i)->constant ? &*n->input(i)->constant : nullptr);
    }
  }
  return cache->Derive("bnfold|" + OpAndAttrsKey(producer) + "|" + OpAndAttrsKey(bn), inputs, make);
}

bool FoldIntoConv(FoldContext& ctx, Node& conv, const Node& bn, const Affine& a) {
  if (!IsConstFloat(conv.input(1)) || (conv.input(2) && !IsConstFloat(conv.input(2)))) {
    return false;
  }
  const Tensor* bias = conv.input(2) ? &*conv.input(2)->constant : nullptr;
  std::vector<Tensor> folded = Derived(conv, bn, ctx.cache, [&]() -> std::vector<Tensor> {
    std::optional<Tensor> w = ConvWeights(conv, *conv.input(1)->constant, a, ctx.arena);
    if (!w) return {};
    Tensor b = FoldBias(bias, a, w->dtype());
    return {std::move(*w), std::move(b)};
  });
  if (folded.size() != 2) return false;
  Value* new_w = ctx.graph.AddConstant(conv.input(1)->name + "_bnfold", std::move(folded[0]));
  Value* new_b = ctx.graph.AddConstant(conv.name + "_bias_bnfold", std::move(folded[1]));
  conv.inputs.resize(3);
  conv.inputs[1] = new_w;
  conv.inputs[2] = new_b;
  return true;
}

bool FoldIntoGemm(FoldContext& ctx, Node& gemm, const Node& bn, const Affine& a) {
  const Value* bv = gemm.input(1);
  if (!IsConstFloat(bv) || bv->constant->rank() != 2) return false;
  if (gemm.input(2) && !IsConstFloat(gemm.input(2))) return false;
  const Tensor& b = *bv->constant;
  const bool trans_b = gemm.GetInt("transB", 0) != 0;
  const int64_t n = trans_b ? b.dim(0) : b.dim(1);
  if (n != static_cast<int64_t>(a.scale.size())) return false;
  const Tensor* c = gemm.input(2) ? &*gemm.input(2)->constant : nullptr;
  if (c && c->numel() != 1 && c->numel() != n) return false;  // a [M, N] C is not per-channel
  const int64_t cols = b.dim(1);
  const double beta = gemm.GetFloat("beta", 1.0f);
  std::vector<Tensor> folded = Derived(gemm, bn, ctx.cache, [&]() -> std::vector<Tensor> {
    Tensor nb = trans_b ? ScaleRows(b, a, ctx.arena, cols)
                        : ScaleWeights(b, a, ctx.arena, [=](int64_t i) { return i % cols; });
    Tensor nc = FoldBias(c, a, nb.dtype(), beta);
    return {std::move(nb), std::move(nc)};
  });
  Value* new_b = ctx.graph.AddConstant(bv->name + "_bnfold", std::move(folded[0]));
  Value* new_c = ctx.graph.AddConstant(gemm.name + "_c_bnfold", std::move(folded[1]));
  gemm.inputs.resize(3);
  gemm.inputs[1] = new_b;
  gemm.inputs[2] = new_c;
  gemm.attrs["beta"] = Attribute::Float(1.0f);
  return true;
}

// Replaces a standalone BatchNormalization by Mul + Add with [C, 1, ..., 1] parameters (the
// Mul goes in before it with the pass's other insertions).
bool LowerToScaleShift(FoldContext& ctx, Node& bn, const Affine& a) {
  const Value* x = bn.input(0);
  if (!x->shape || x->shape->size() < 2) return false;
  std::vector<int64_t> pshape(x->shape->size() - 1, 1);
  pshape[0] = static_cast<int64_t>(a.scale.size());
  Tensor s(x->dtype, pshape), t(x->dtype, pshape);
  for (size_t i = 0; i < a.scale.size(); ++i) {
    s.SetDouble(static_cast<int64_t>(i), a.scale[i]);
    t.SetDouble(static_cast<int64_t>(i), a.shift[i]);
  }
  Value* sv = ctx.graph.AddConstant(bn.name + "_scale", std::move(s));
  Value* tv = ctx.graph.AddConstant(bn.name + "_shift", std::move(t));
  Value* mid = ctx.graph.NewValue(bn.name + "_scaled");
  mid->dtype = x->dtype;
  mid->shape = x->shape;
  auto mul = std::make_unique<Node>();
  mul->op_type = "Mul";
  mul->name = bn.name + "_mul";
  mul->opset = bn.opset;
  mul->inputs = {bn.inputs[0], sv};
  mul->outputs = {mid};
  mid->producer = mul.get();
  ctx.inserted.emplace_back(&bn, std::move(mul));
  bn.op_type = "Add";
  bn.attrs.clear();
  bn.inputs = {mid, tv};
  bn.outputs.resize(1);
  return true;
}

bool FoldOne(FoldContext& ctx, Node& bn) {
  std::optional<Affine> a = BatchNormAffine(ctx, bn);
  if (!a) return false;
  Value* x = bn.input(0);
  Node* producer = x->producer;
  auto readers = ctx.readers.find(x);
  const bool exclusive =
      producer && readers != ctx.readers.end() && readers->second == 1 && !ctx.outputs.count(x);
  if (exclusive && producer->domain.empty()) {
    bool folded = false;
    if (producer->op_type == "Conv" || producer->op_type == "ConvTranspose") {
      folded = FoldIntoConv(ctx, *producer, bn, *a);
    } else if (producer->op_type == "Gemm") {
      folded = FoldIntoGemm(ctx, *producer, bn, *a);
    }
    if (folded) {
      Value* y = bn.outputs[0];
      // The producer now computes y: hand it the BatchNorm's output value (its name may be a
      // graph output) and drop the BatchNorm.
      producer->outputs[0] = y;
      y->producer = producer;
      bn.outputs[0] = nullptr;
      ctx.removed.push_back(&bn);
      return true;
    }
  }
  return LowerToScaleShift(ctx, bn, *a);
}

// Bytes of the weights the pass may rescale: the arena is sized for all of them at once.
size_t FoldableWeightBytes(const std::vector<Node*>& bns) {
  size_t bytes = 0;
  for (const Node* bn : bns) {
    const Node* p = bn->input(0) ? bn->input(0)->producer : nullptr;
    const Value* w = p ? p->input(1) : nullptr;
    const bool layer =
        p && (p->op_type == "Conv" || p->op_type == "ConvTranspose" || p->op_type == "Gemm");
    if (layer && IsConstFloat(w)) bytes += WeightArena::Footprint(w->constant->nbytes());
  }
  return bytes;
}

}  // namespace

absl::StatusOr<bool> FoldBatchNorm(Graph& graph) { return FoldBatchNormWithCache(graph, nullptr); }

absl::StatusOr<bool> FoldBatchNormWithCache(Graph& graph, FoldCache* cache) {
  std::vector<Node*> bns;
  for (const auto& n : graph.nodes()) {
    if (n->op_type == "BatchNormalization" && n->domain.empty()) bns.push_back(n.get());
  }
  if (bns.empty()) return false;
  FoldContext ctx(graph, cache, FoldableWeightBytes(bns));
  bool changed = false;
  for (Node* bn : bns) changed = FoldOne(ctx, *bn) || changed;
  InsertNodes(graph, std::move(ctx.inserted));
  RemoveNodes(graph, ctx.removed);
  if (changed) graph.PruneUnusedValues();
  return changed;
}

}  // namespace kiln::passes
