#include "compiler/passes/quantize_int8.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "compiler/passes/quantization_noise.h"

namespace kiln::passes {
namespace {

// DequantizeLinear takes a per-channel `axis` from opset 13.
constexpr int64_t kQdqOpset = 13;

bool IsOnnx(const Node* n, const char* op) { return n && n->domain.empty() && n->op_type == op; }

bool Float32(const Value* v) { return v && v->dtype == DType::kFloat32; }

bool ConstFloat32(const Value* v) { return Float32(v) && v->is_constant(); }

struct ActivationParams {
  float scale = 1;
  uint8_t zero = 0;
};

// uint8, asymmetric, per tensor, over the observed range widened to include 0 (so zero
// padding and a Relu's zeros are exact); nullopt without a finite range.
std::optional<ActivationParams> ParamsFor(const Calibration& ranges, const Value* v) {
  auto it = ranges.find(v->name);
  if (it == ranges.end()) return std::nullopt;
  const double lo = std::min<double>(it->second.lo, 0), hi = std::max<double>(it->second.hi, 0);
  if (!std::isfinite(lo) || !std::isfinite(hi)) return std::nullopt;
  if (hi - lo <= 0) return ActivationParams{};  // only zeros seen
  const float scale = static_cast<float>((hi - lo) / 255.0);
  if (!(scale > 0) || !std::isfinite(scale)) return std::nullopt;
  const double zero = std::clamp(std::nearbyint(-lo / scale), 0.0, 255.0);
  return ActivationParams{scale, static_cast<uint8_t>(zero)};
}

// A Relu, or a Clip whose bounds are constants (or absent): a clamp fuse_qdq folds into the
// quantization that follows it.
bool IsConstantClamp(const Node* n) {
  if (IsOnnx(n, "Relu")) return true;
  if (!IsOnnx(n, "Clip")) return false;
  for (size_t i : {1, 2}) {
    if (n->input(i) && !n->input(i)->is_constant()) return false;
  }
  return true;
}

bool IsProductOp(const Node* n) {
  return IsOnnx(n, "Conv") || IsOnnx(n, "MatMul") || IsOnnx(n, "Gemm");
}

// The products whose result reaches a graph output through no other product (a classifier's
// Gemm, a transformer's last projection): their result would be quantized right before the
// output, one more rounding of the answer (a percent of a logits tensor's range) that no later
// layer averages out, so they stay float, as quantization tools leave the logits.
std::unordered_set<const Node*> HeadProducts(const Graph& graph) {
  std::unordered_set<const Node*> heads, seen;
  std::vector<const Node*> stack;
  for (const Value* out : graph.outputs) {
    if (out->producer) stack.push_back(out->producer);
  }
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    if (IsProductOp(n)) {
      heads.insert(n);
      continue;
    }
    for (const Value* in : n->inputs) {
      if (in && in->producer) stack.push_back(in->producer);
    }
  }
  return heads;
}

class Quantizer {
 public:
  Quantizer(Graph& graph, const Calibration& ranges, FoldCache* cache)
      : g_(graph), ranges_(ranges), cache_(cache), float_(HeadProducts(graph)) {}

  // int8-mixed: the noisiest candidates stay float until those quantized carry at most
  // `noise_kept` of the estimated noise. Before any rewrite (it reads the float graph).
  void KeepNoisiestFloat(double noise_kept);

  // A Conv or MatMul with constant float weights: its input, weights and result quantized.
  bool Product(Node& n);
  // A Gemm with constant weights rewritten as the MatMul [+ Add] it is, then quantized.
  bool Gemm(Node& n);
  // A MaxPool reading a dequantized value: its result quantized alike.
  bool MaxPool(Node& n);

 private:
  std::optional<ActivationParams> Params(const Value* v) const;
  double NoiseOf(const Value* v) const;
  bool InputReady(const Value* x) const;
  Value* Input(Value* x, const ActivationParams& p);
  Value* Weights(Value* w, int64_t axis);
  Value* ResultOf(const Node& n) const;
  Value* AddPair(Value* x, Value* scale, Value* zero);
  void QuantizeResult(Value* r, Value* scale, Value* zero);
  Node* AddQdqNode(const char* op, std::vector<Value*> inputs, Value* out, int64_t axis = -1);

  Graph& g_;
  const Calibration& ranges_;
  FoldCache* cache_;
  std::unordered_set<const Node*> float_;  // products that stay float (HeadProducts, the noisiest)
  std::unordered_map<const Value*, Value*> dequantized_;  // activation -> DQ(Q(activation))
  std::unordered_map<const Value*, Value*> weights_;      // float weights -> DQ(int8 weights)
  Calibration derived_;  // ranges bounded here (a Gemm's product before its bias)
};

std::optional<ActivationParams> Quantizer::Params(const Value* v) const {
  return derived_.count(v->name) ? ParamsFor(derived_, v) : ParamsFor(ranges_, v);
}

// The noise quantizing `v` adds, relative to its power: a uniform quantizer's step^2 / 12
// over the mean square observed (0 for a value already dequantized: no new rounding;
// infinite without a finite range or a mean square, which leaves its product float anyway).
double Quantizer::NoiseOf(const Value* v) const {
  if (IsOnnx(v->producer, "DequantizeLinear")) return 0;
  const std::optional<ActivationParams> p = Params(v);
  auto it = ranges_.find(v->name);
  if (!p || it == ranges_.end() || !(it->second.mean_sq > 0)) {
    return std::numeric_limits<double>::infinity();
  }
  return double{p->scale} * p->scale / 12.0 / it->second.mean_sq;
}

void Quantizer::KeepNoisiestFloat(double noise_kept) {
  if (!(noise_kept < 1)) return;
  const std::unordered_map<const Value*, double> sensitivity = NoiseSensitivity(g_, ranges_);
  std::vector<std::pair<double, const Node*>> scored;  // (the outputs' noise from it, product)
  double total = 0;
  for (const auto& node : g_.nodes()) {
    const Node& n = *node;
    if (!IsProductOp(&n) || float_.count(&n) || !ConstFloat32(n.input(1))) continue;
    // The result as Product quantizes it (a Gemm's before its bias: its own range bounds it).
    const Value* r = IsOnnx(&n, "Gemm") ? n.output(0) : ResultOf(n);
    if (!n.input(0) || !r) continue;
    // Both roundings, as power at the result (the product keeps relative noise).
    auto s = sensitivity.find(r);
    const double noise = (NoiseOf(n.input(0)) + NoiseOf(r)) * MeanSquareOf(ranges_, r) *
                         (s == sensitivity.end() ? 0.0 : s->second);
    if (!std::isfinite(noise)) continue;
    scored.emplace_back(noise, &n);
    total += noise;
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  double quantized = total;
  for (const auto& [noise, n] : scored) {
    if (quantized <= noise_kept * total) break;
    float_.insert(n);
    quantized -= noise;
  }
}

// Whether x can be read quantized: already dequantized, or with a range.
bool Quantizer::InputReady(const Value* x) const {
  return IsOnnx(x->producer, "DequantizeLinear") || dequantized_.count(x) > 0 ||
         Params(x).has_value();
}

Node* Quantizer::AddQdqNode(const char* op, std::vector<Value*> inputs, Value* out, int64_t axis) {
  Node* n = g_.AddNode(op, std::move(inputs), {out}, out->name);
  n->opset = std::max(n->opset, kQdqOpset);
  if (axis >= 0) n->attrs["axis"] = Attribute::Int(axis);
  return n;
}

// x -> QuantizeLinear -> DequantizeLinear with the given constants; returns the dequantized
// value (x's readers are not rewired).
Value* Quantizer::AddPair(Value* x, Value* scale, Value* zero) {
  Value* q = g_.NewValue(x->name + "_quantized");
  q->dtype = DType::kUInt8;
  q->shape = x->shape;
  Value* dq = g_.NewValue(x->name + "_dequantized");
  dq->dtype = DType::kFloat32;
  dq->shape = x->shape;
  AddQdqNode("QuantizeLinear", {x, scale, zero}, q);
  AddQdqNode("DequantizeLinear", {q, scale, zero}, dq);
  return dq;
}

// The activation as a quantized product reads it: a value a DequantizeLinear produced as it
// is, else through one Q/DQ pair shared by every product that reads it.
Value* Quantizer::Input(Value* x, const ActivationParams& p) {
  if (IsOnnx(x->producer, "DequantizeLinear")) return x;
  if (auto it = dequantized_.find(x); it != dequantized_.end()) return it->second;
  Value* scale = g_.AddConstant(x->name + "_scale", Tensor::Scalar(DType::kFloat32, p.scale));
  Value* zero = g_.AddConstant(x->name + "_zero_point", Tensor::Scalar(DType::kUInt8, p.zero));
  Value* dq = AddPair(x, scale, zero);
  dequantized_[x] = dq;
  return dq;
}

// int8, symmetric, one scale per slice along `axis` of `t` ([q, scales]); empty for weights
// that are not finite.
std::vector<Tensor> QuantizeWeights(const Tensor& t, int64_t axis) {
  const int64_t channels = t.dim(axis);
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < t.rank(); ++d) inner *= t.dim(d);
  const int64_t outer = t.numel() / (channels * inner);
  const float* src = t.data<float>();
  std::vector<float> max_abs(channels, 0.0f);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < channels; ++c) {
      const float* row = src + (o * channels + c) * inner;
      float& m = max_abs[c];
      for (int64_t i = 0; i < inner; ++i) {
        if (!std::isfinite(row[i])) return {};
        m = std::max(m, std::fabs(row[i]));
      }
    }
  }
  Tensor scales(DType::kFloat32, {channels});
  float* s = scales.mutable_data<float>();
  for (int64_t c = 0; c < channels; ++c) s[c] = max_abs[c] > 0 ? max_abs[c] / 127.0f : 1.0f;
  Tensor q(DType::kInt8, t.shape());
  int8_t* dst = q.mutable_data<int8_t>();
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t at = (o * channels + c) * inner;
      for (int64_t i = 0; i < inner; ++i) {
        const float v = std::nearbyint(src[at + i] / s[c]);
        dst[at + i] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
      }
    }
  }
  return {std::move(q), std::move(scales)};
}

// The weights behind a DequantizeLinear of their int8 form (derived once per model with a
// cache); nullptr for weights that are not finite.
Value* Quantizer::Weights(Value* w, int64_t axis) {
  if (auto it = weights_.find(w); it != weights_.end()) return it->second;
  const Tensor& t = *w->constant;
  auto make = [&] { return QuantizeWeights(t, axis); };
  std::vector<Tensor> qs =
      cache_ ? cache_->Derive("quantize_int8 axis " + std::to_string(axis), {&t}, make) : make();
  if (qs.size() != 2) return nullptr;
  Value* wq = g_.AddConstant(w->name + "_quantized", std::move(qs[0]));
  Value* ws = g_.AddConstant(w->name + "_scale", std::move(qs[1]));
  Value* out = g_.NewValue(w->name + "_dequantized");
  out->dtype = DType::kFloat32;
  out->shape = w->shape;
  AddQdqNode("DequantizeLinear", {wq, ws}, out, axis);
  weights_[w] = out;
  return out;
}

// Where the product's result is quantized: after the Relu or Clip that is its only reader,
// else the result itself; nullptr when that value is a graph output (outputs stay float).
Value* Quantizer::ResultOf(const Node& n) const {
  Value* y = n.output(0);
  if (g_.IsGraphOutput(y)) return nullptr;
  std::vector<Node*> readers = g_.Consumers(y);
  if (readers.size() == 1 && IsConstantClamp(readers[0]) && readers[0]->input(0) == y) {
    Value* r = readers[0]->output(0);
    return g_.IsGraphOutput(r) ? nullptr : r;
  }
  return y;
}

// Every reader of `r` reads DQ(Q(r)) instead.
void Quantizer::QuantizeResult(Value* r, Value* scale, Value* zero) {
  std::vector<Node*> readers = g_.Consumers(r);
  Value* dq = AddPair(r, scale, zero);
  for (Node* reader : readers) {
    for (Value*& in : reader->inputs) {
      if (in == r) in = dq;
    }
  }
  dequantized_[r] = dq;
}

bool Quantizer::Product(Node& n) {
  const bool conv = IsOnnx(&n, "Conv");
  if ((!conv && !IsOnnx(&n, "MatMul")) || float_.count(&n)) return false;
  Value* x = n.input(0);
  Value* w = n.input(1);
  if (!Float32(x) || x->is_constant() || !Float32(n.output(0)) || !ConstFloat32(w)) return false;
  if (conv ? w->constant->rank() < 3 : w->constant->rank() != 2) return false;
  if (conv && n.input(2) && !ConstFloat32(n.input(2))) return false;
  if (!conv && (!x->shape || x->shape->size() < 2)) return false;
  Value* r = ResultOf(n);
  const std::optional<ActivationParams> out = r ? Params(r) : std::nullopt;
  if (!InputReady(x) || !out) return false;
  Value* wq = Weights(w, conv ? 0 : 1);
  if (!wq) return false;
  // An input already dequantized needs no range of its own (Input returns it as it is).
  n.inputs[0] = Input(x, Params(x).value_or(ActivationParams{}));
  n.inputs[1] = wq;
  QuantizeResult(r, g_.AddConstant(r->name + "_scale", Tensor::Scalar(DType::kFloat32, out->scale)),
                 g_.AddConstant(r->name + "_zero_point", Tensor::Scalar(DType::kUInt8, out->zero)));
  return true;
}

// [K, N] weights from a Gemm's B ([N, K] when transB).
Tensor Transposed(const Tensor& b) {
  const int64_t rows = b.dim(0), cols = b.dim(1);
  Tensor t(DType::kFloat32, {cols, rows});
  const float* src = b.data<float>();
  float* dst = t.mutable_data<float>();
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) dst[j * rows + i] = src[i * cols + j];
  }
  return t;
}

// A Gemm computing a * B + C (transA 0, alpha and beta 1, constant B and C): MatMul(a, B as
// [K, N]) and, with C, an Add of it. The result quantizes before the bias (fuse_qdq needs the
// Q right after the product), over a range bounded from the calibrated result's: y - C.
bool Quantizer::Gemm(Node& n) {
  if (!IsOnnx(&n, "Gemm") || float_.count(&n)) return false;
  Value* a = n.input(0);
  Value* b = n.input(1);
  Value* c = n.input(2);
  Value* y = n.output(0);
  if (n.GetInt("transA", 0) != 0 || n.GetFloat("alpha", 1) != 1 || n.GetFloat("beta", 1) != 1 ||
      !Float32(a) || a->is_constant() || !ConstFloat32(b) || b->constant->rank() != 2 ||
      !Float32(y) || !y->shape || (c && !ConstFloat32(c)) || (!c && g_.IsGraphOutput(y))) {
    return false;
  }
  auto result = ranges_.find(y->name);
  if (result == ranges_.end() || !InputReady(a)) return false;
  float c_lo = 0, c_hi = 0;
  for (int64_t i = 0; c && i < c->constant->numel(); ++i) {
    const float v = c->constant->data<float>()[i];
    if (!std::isfinite(v)) return false;
    c_lo = i ? std::min(c_lo, v) : v;
    c_hi = i ? std::max(c_hi, v) : v;
  }
  Value* w = b;
  if (n.GetInt("transB", 0) != 0) {
    const Tensor& t = *b->constant;
    auto make = [&] { return std::vector<Tensor>{Transposed(t)}; };
    std::vector<Tensor> kn =
        cache_ ? cache_->Derive("quantize_int8 gemm transB", {&t}, make) : make();
    w = g_.AddConstant(b->name + "_kn", std::move(kn[0]));
  }
  Value* product = y;
  if (c) {
    product = g_.NewValue(y->name + "_product");
    product->dtype = DType::kFloat32;
    product->shape = y->shape;
    derived_[product->name] = {result->second.lo - c_hi, result->second.hi - c_lo};
    Node* add = g_.AddNode("Add", {product, c}, {y}, product->name + "_bias");
    add->opset = n.opset;
  }
  n.op_type = "MatMul";
  n.attrs.clear();
  n.inputs = {a, w};
  n.outputs = {product};
  product->producer = &n;
  Product(n);  // the preconditions it needs were checked above
  return true;
}

bool Quantizer::MaxPool(Node& n) {
  if (!IsOnnx(&n, "MaxPool") || n.output(1) || !Float32(n.output(0))) return false;
  const Node* dq = n.input(0) ? n.input(0)->producer : nullptr;
  if (!IsOnnx(dq, "DequantizeLinear") || !dq->input(2)) return false;
  const Value* scale = dq->input(1);
  const Value* zero = dq->input(2);
  if (!scale->is_constant() || scale->constant->numel() != 1 || !zero->is_constant() ||
      zero->constant->numel() != 1 || zero->dtype != DType::kUInt8) {
    return false;
  }
  Value* y = n.output(0);
  if (g_.IsGraphOutput(y)) return false;
  QuantizeResult(y, dq->input(1), dq->input(2));
  return true;
}

}  // namespace

absl::StatusOr<bool> QuantizeInt8(Graph& graph, const Calibration& ranges, FoldCache* cache,
                                  double noise_kept) {
  std::vector<Node*> order;
  for (const auto& n : graph.nodes()) order.push_back(n.get());
  Quantizer q(graph, ranges, cache);
  q.KeepNoisiestFloat(noise_kept);
  bool changed = false;
  for (Node* n : order) changed = (q.Gemm(*n) || q.Product(*n) || q.MaxPool(*n)) || changed;
  if (changed && !graph.TopologicalSort()) {
    return absl::InternalError("quantize_int8: the quantized graph has a cycle");
  }
  return changed;
}

absl::StatusOr<bool> QuantizeInt8Pass::RunImpl(Graph& graph) {
  if (!ranges_) {
    return absl::FailedPreconditionError(
        "quantize_int8: precision int8 needs a calibration (the activations' ranges)");
  }
  return QuantizeInt8(graph, *ranges_, cache_.get(), noise_kept_);
}

}  // namespace kiln::passes
