#include "compiler/passes/fold_scale_into_weights.h"

#include <cmath>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "ir/graph_edit.h"

namespace kiln::passes {
namespace {

enum class Kind { kConv, kGemm, kMatMul };

// A linear layer whose constants can absorb a per-channel step.
struct Layer {
  Node* node = nullptr;
  Kind kind = Kind::kConv;
  int64_t channels = 0;  // output channels
  int64_t axis = 0;      // where they are in the output
  int64_t rank = 0;      // output rank
};

// y * v (scale) or y + v (shift), v per channel; Div and Sub arrive inverted and negated.
struct Step {
  Node* node = nullptr;
  bool scale = true;
  std::vector<double> v;
};

bool IsConstFloat(const Value* v) { return v && v->constant && IsFloatDType(v->dtype); }

// Whether the layer's bias can be rewritten per channel: Conv's B is [M]; Gemm's C must be a
// scalar or one value per column (a full [M, N] C is not a per-channel quantity).
bool HasFoldableBias(const Layer& l) {
  const Value* b = l.kind == Kind::kMatMul ? nullptr : l.node->input(2);
  if (!b) return true;
  if (!IsConstFloat(b)) return false;
  const Tensor& t = *b->constant;
  if (l.kind == Kind::kGemm && t.numel() == 1) return true;
  return t.numel() == l.channels && t.rank() >= 1 && t.dim(t.rank() - 1) == l.channels;
}

std::optional<Layer> AsLayer(Node& n) {
  const Value* y = n.output(0);
  if (!n.domain.empty() || !y || !y->shape || !IsConstFloat(n.input(1))) return std::nullopt;
  const Tensor& w = *n.input(1)->constant;
  Layer l;
  l.node = &n;
  l.rank = static_cast<int64_t>(y->shape->size());
  if (n.op_type == "Conv" && w.rank() >= 3 && l.rank >= 3) {
    l.kind = Kind::kConv;
    l.channels = w.dim(0);  // W: [M, C/group, k...]
    l.axis = 1;
  } else if (n.op_type == "Gemm" && w.rank() == 2 && l.rank == 2) {
    l.kind = Kind::kGemm;
    l.channels = n.GetInt("transB", 0) ? w.dim(0) : w.dim(1);
    l.axis = 1;
  } else if (n.op_type == "MatMul" && w.rank() >= 2 && l.rank >= 2) {
    l.kind = Kind::kMatMul;
    l.channels = w.dim(w.rank() - 1);
    l.axis = l.rank - 1;
  } else {
    return std::nullopt;
  }
  if (!HasFoldableBias(l)) return std::nullopt;
  return l;
}

// The per-channel values of constant c when it broadcasts against y along the channel axis
// only (so the step keeps y's shape and is one number per channel).
std::optional<std::vector<double>> ChannelValues(const Value* c, const Value* y, const Layer& l) {
  if (!IsConstFloat(c) || c->dtype != y->dtype) return std::nullopt;
  const std::vector<int64_t>& dims = c->constant->shape();
  const int64_t r = static_cast<int64_t>(dims.size());
  if (r > l.rank) return std::nullopt;
  for (int64_t i = 0; i < r; ++i) {
    if (dims[i] != 1 && (l.rank - r + i != l.axis || dims[i] != l.channels)) return std::nullopt;
  }
  const bool scalar = c->constant->numel() == 1;
  std::vector<double> v(l.channels);
  for (int64_t k = 0; k < l.channels; ++k) {
    v[k] = c->constant->GetDouble(scalar ? 0 : k);
    if (!std::isfinite(v[k])) return std::nullopt;
  }
  return v;
}

// Each value's distinct readers in schedule order, indexed once per pass run (Consumers walks
// the graph per call). A fold never changes the readers of a value the pass asks about: it
// only asks about a layer's output, and a fold hands the layer its step's output, whose
// readers stay, and removes the step, which read nothing else but constants.
using Readers = absl::flat_hash_map<const Value*, std::vector<Node*>>;

Readers IndexReaders(const Graph& graph) {
  Readers readers;
  for (const auto& n : graph.nodes()) {
    for (const Value* in : n->inputs) {
      if (!in) continue;
      std::vector<Node*>& users = readers[in];
      // A node reads a value once, however many of its inputs name it (it was pushed last).
      if (users.empty() || users.back() != n.get()) users.push_back(n.get());
    }
  }
  return readers;
}

std::optional<Step> MatchStep(const Graph& graph, const Readers& readers, const Layer& l) {
  Value* y = l.node->output(0);
  auto it = readers.find(y);
  if (graph.IsGraphOutput(y) || it == readers.end() || it->second.size() != 1) return std::nullopt;
  const std::vector<Node*>& users = it->second;
  Node* e = users[0];
  if (!e->domain.empty() || e->inputs.size() != 2 || !e->output(0)) return std::nullopt;
  const bool y_first = e->input(0) == y;
  Value* c = y_first ? e->input(1) : e->input(0);
  std::optional<std::vector<double>> v = c == y ? std::nullopt : ChannelValues(c, y, l);
  if (!v) return std::nullopt;
  Step s{e, true, std::move(*v)};
  const std::string& op = e->op_type;
  const bool has_bias_input = l.kind != Kind::kMatMul;
  if (op == "Div" && y_first) {
    for (double& x : s.v) {
      if (x == 0.0) return std::nullopt;
      x = 1.0 / x;
    }
  } else if ((op == "Add" || (op == "Sub" && y_first)) && has_bias_input) {
    s.scale = false;
    if (op == "Sub") {
      for (double& x : s.v) x = -x;
    }
  } else if (op != "Mul") {
    return std::nullopt;
  }
  return s;
}

// The output channel of flat element i of the weight tensor.
int64_t WeightChannel(const Layer& l, const Tensor& w, int64_t i) {
  switch (l.kind) {
    case Kind::kConv:
      return i / (w.numel() / l.channels);
    case Kind::kGemm:
      return l.node->GetInt("transB", 0) ? i / w.dim(1) : i % w.dim(1);
    case Kind::kMatMul:
      return i % l.channels;
  }
  return 0;
}

// The layer's bias as one value per channel with Gemm's beta applied (zeros when absent).
std::vector<double> BiasValues(const Layer& l) {
  std::vector<double> b(l.channels, 0.0);
  const Value* bv = l.kind == Kind::kMatMul ? nullptr : l.node->input(2);
  if (!bv) return b;
  const double beta = l.kind == Kind::kGemm ? l.node->GetFloat("beta", 1.0f) : 1.0;
  const bool scalar = bv->constant->numel() == 1;
  for (int64_t k = 0; k < l.channels; ++k) b[k] = beta * bv->constant->GetDouble(scalar ? 0 : k);
  return b;
}

void ApplyStep(Graph& graph, const Layer& l, const Step& s, std::vector<Node*>& removed) {
  Node& n = *l.node;
  const Tensor& w = *n.input(1)->constant;
  const DType dtype = w.dtype();
  if (s.scale) {
    Tensor nw(dtype, w.shape());
    for (int64_t i = 0; i < w.numel(); ++i)
      nw.SetDouble(i, w.GetDouble(i) * s.v[WeightChannel(l, w, i)]);
    n.inputs[1] = graph.AddConstant(n.input(1)->name + "_scaled", std::move(nw));
  }
  // A scale only touches an existing bias; a shift always needs one.
  if (l.kind != Kind::kMatMul && (!s.scale || n.input(2))) {
    std::vector<double> b = BiasValues(l);
    Tensor nb(dtype, {l.channels});
    for (int64_t k = 0; k < l.channels; ++k)
      nb.SetDouble(k, s.scale ? b[k] * s.v[k] : b[k] + s.v[k]);
    n.inputs.resize(3);
    n.inputs[2] = graph.AddConstant(n.name + "_bias_folded", std::move(nb));
    if (l.kind == Kind::kGemm) n.attrs["beta"] = Attribute::Float(1.0f);  // beta is in C now
  }
  // The layer now computes the step's result: hand it the step's output value (its name may
  // be a graph output) and drop the step.
  Value* out = s.node->output(0);
  s.node->outputs[0] = nullptr;
  removed.push_back(s.node);  // removed with the others at the end of the pass
  n.outputs[0] = out;
  out->producer = &n;
}

}  // namespace

absl::StatusOr<bool> FoldScaleIntoWeights(Graph& graph) {
  std::vector<Node*> layers;
  for (const auto& n : graph.nodes()) {
    const std::string& op = n->op_type;
    if (n->domain.empty() && (op == "Conv" || op == "Gemm" || op == "MatMul")) {
      layers.push_back(n.get());
    }
  }
  bool changed = false;
  const Readers readers = IndexReaders(graph);
  std::vector<Node*> removed;
  for (Node* n : layers) {
    // Each fold removes one step node, so this ends; it lets Conv -> Mul -> Add fold fully.
    for (;;) {
      std::optional<Layer> l = AsLayer(*n);
      std::optional<Step> s = l ? MatchStep(graph, readers, *l) : std::nullopt;
      if (!s) break;
      ApplyStep(graph, *l, *s, removed);
      changed = true;
    }
  }
  RemoveNodes(graph, removed);
  if (changed) graph.PruneUnusedValues();
  return changed;
}

}  // namespace kiln::passes
