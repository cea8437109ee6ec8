#include "compiler/shape/last_position.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/shape/infer.h"

namespace kiln::shape {
namespace {

// How a position-wise node reads an input: cut along with its result (the input carries the
// axis at the result's index), or whole (weights, a broadcast operand that does not vary along
// the axis, MatMul's right operand when the axis is the left one's rows).
enum class Role { kCarried, kWhole };

int64_t RankOf(const Value* v) {
  return v && v->shape ? static_cast<int64_t>(v->shape->size()) : -1;
}

// `v` is the same at every position along axis `a` of a rank-`r` result it broadcasts into.
bool Invariant(const Value* v, int64_t r, int64_t a) {
  const int64_t rank = RankOf(v);
  if (rank < 0) return false;
  const int64_t j = a - (r - rank);
  return j < 0 || (*v->shape)[static_cast<size_t>(j)] == Dim(1);
}

// `v` carries axis `a` of the result `out` (same rank, same size there).
bool Carries(const Value* v, const Value* out, int64_t a) {
  return RankOf(v) == RankOf(out) &&
         (*v->shape)[static_cast<size_t>(a)] == (*out->shape)[static_cast<size_t>(a)];
}

const std::set<std::string>& ElementwiseOps() {
  static const std::set<std::string> ops{"Abs",
                                         "Add",
                                         "And",
                                         "Cast",
                                         "Ceil",
                                         "Celu",
                                         "Clip",
                                         "Cos",
                                         "Div",
                                         "Elu",
                                         "Equal",
                                         "Erf",
                                         "Exp",
                                         "FastGelu",
                                         "Floor",
                                         "Gelu",
                                         "Greater",
                                         "HardSigmoid",
                                         "HardSwish",
                                         "Identity",
                                         "LeakyRelu",
                                         "Less",
                                         "Log",
                                         "Max",
                                         "Mean",
                                         "Min",
                                         "Mish",
                                         "Mod",
                                         "Mul",
                                         "Neg",
                                         "Not",
                                         "Or",
                                         "Pow",
                                         "PRelu",
                                         "QuickGelu",
                                         "Reciprocal",
                                         "Relu",
                                         "Round",
                                         "Selu",
                                         "Sigmoid",
                                         "Sign",
                                         "Sin",
                                         "Softplus",
                                         "Softsign",
                                         "Sqrt",
                                         "Sub",
                                         "Sum",
                                         "Tanh",
                                         "ThresholdedRelu",
                                         "Where",
                                         "Xor"};
  return ops;
}

// A normalizing op's axis attribute (negative counts from the end) as an index into rank r.
int64_t AxisAttr(const Node& n, int64_t dflt, int64_t r) {
  const int64_t axis = n.GetInt("axis", dflt);
  return axis < 0 ? axis + r : axis;
}

// Whether a reduction keeps the rank and leaves axis `a` alone.
bool ReducesOtherAxes(const Node& n, int64_t r, int64_t a) {
  if (n.GetInt("keepdims", 1) != 1) return false;
  std::vector<int64_t> axes = n.GetInts("axes");
  const Value* in1 = n.input(1);
  if (in1) {
    if (!in1->is_constant()) return false;
    axes.clear();
    for (int64_t i = 0; i < in1->constant->numel(); ++i) axes.push_back(in1->constant->GetInt(i));
  }
  if (axes.empty()) return false;  // all axes (or none, with noop_with_empty_axes)
  return std::none_of(axes.begin(), axes.end(),
                      [&](int64_t x) { return (x < 0 ? x + r : x) == a; });
}

// Each input's role when `n` is position-wise along axis `a` of its first output, else
// nullopt.
std::optional<std::vector<Role>> Roles(const Node& n, int64_t a) {
  const Value* out = n.output(0);
  const int64_t r = RankOf(out);
  if (!n.domain.empty() && n.domain != "com.microsoft") return std::nullopt;
  if (r <= a || !n.captures.empty()) return std::nullopt;
  std::vector<Role> roles(n.inputs.size(), Role::kWhole);
  auto first_carried_rest_invariant = [&]() -> std::optional<std::vector<Role>> {
    if (!Carries(n.input(0), out, a)) return std::nullopt;
    roles[0] = Role::kCarried;
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      if (n.inputs[i] && !Invariant(n.inputs[i], r, a)) return std::nullopt;
    }
    return roles;
  };
  const std::string& op = n.op_type;
  if (ElementwiseOps().count(op)) {
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const Value* v = n.inputs[i];
      if (!v || Invariant(v, r, a)) continue;
      if (!Carries(v, out, a)) return std::nullopt;
      roles[i] = Role::kCarried;
    }
    return roles;
  }
  if (op == "MatMul") {
    // Rows of the left operand: its row axis, or a batch axis the right one does not vary on.
    if (!Carries(n.input(0), out, a) || a > r - 2) return std::nullopt;
    if (a < r - 2 && !Invariant(n.input(1), r, a)) return std::nullopt;
    roles[0] = Role::kCarried;
    return roles;
  }
  if (op == "Gemm") {
    if (a != 0 || n.GetInt("transA", 0) != 0) return std::nullopt;
    if (n.input(2) && !Invariant(n.input(2), r, a)) return std::nullopt;
    roles[0] = Role::kCarried;
    if (!Carries(n.input(0), out, a)) return std::nullopt;
    return roles;
  }
  if (op == "LayerNormalization" || op == "SimplifiedLayerNormalization" ||
      op == "RMSNormalization") {
    if (AxisAttr(n, -1, r) <= a) return std::nullopt;
    return first_carried_rest_invariant();
  }
  if (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") {
    // Before opset 13 the op flattens to [before axis, from axis]: rows stay apart when the
    // axis comes after ours too.
    if (AxisAttr(n, n.opset >= 13 ? -1 : 1, r) <= a) return std::nullopt;
    return first_carried_rest_invariant();
  }
  if (op.rfind("Reduce", 0) == 0) {
    if (!ReducesOtherAxes(n, r, a) || !Carries(n.input(0), out, a)) return std::nullopt;
    roles[0] = Role::kCarried;
    return roles;
  }
  return std::nullopt;
}

using Uses = std::unordered_map<const Value*, std::vector<std::pair<Node*, size_t>>>;

Uses UsesOf(const Graph& g) {
  Uses uses;
  for (const auto& n : g.nodes()) {
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      if (n->inputs[i]) uses[n->inputs[i]].emplace_back(n.get(), i);
    }
  }
  return uses;
}

// The nodes to cut: the output's producer, then (latest first) every node whose results are
// read only by cut nodes, at inputs they carry, and is position-wise itself.
std::map<Node*, std::vector<Role>> CutSet(const Graph& g, Node* root, int64_t a) {
  std::map<Node*, std::vector<Role>> cut;
  if (auto roles = Roles(*root, a)) cut.emplace(root, std::move(*roles));
  if (cut.empty()) return cut;
  const Uses uses = UsesOf(g);
  const auto& nodes = g.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node* n = it->get();
    if (cut.count(n)) continue;
    bool read = false, only_carried = true;
    for (const Value* o : n->outputs) {
      if (!o) continue;
      if (g.IsGraphOutput(o)) only_carried = false;
      auto u = uses.find(o);
      if (u == uses.end()) continue;
      for (const auto& [consumer, index] : u->second) {
        auto c = cut.find(consumer);
        read = true;
        only_carried = only_carried && c != cut.end() && c->second[index] == Role::kCarried;
      }
    }
    if (!read || !only_carried) continue;
    if (auto roles = Roles(*n, a)) cut.emplace(n, std::move(*roles));
  }
  return cut;
}

// A Slice of `v`'s last position along `a`, placed before `before`.
Value* SliceLast(Graph& g, Value* v, int64_t a, Node* before) {
  auto s = std::make_unique<Node>();
  s->op_type = "Slice";
  s->name = v->name + "/last_position";
  auto it = g.opsets.find(kOnnxDomain);
  s->opset = it == g.opsets.end() ? 13 : it->second;
  const int64_t end = std::numeric_limits<int64_t>::max();
  s->inputs = {v};
  if (s->opset >= 10) {
    s->inputs.push_back(g.AddConstant(v->name + "/last_start", Tensor::FromInt64({-1}, {1})));
    s->inputs.push_back(g.AddConstant(v->name + "/last_end", Tensor::FromInt64({end}, {1})));
    s->inputs.push_back(g.AddConstant(v->name + "/last_axis", Tensor::FromInt64({a}, {1})));
  } else {
    s->attrs["starts"] = Attribute::Ints({-1});
    s->attrs["ends"] = Attribute::Ints({end});
    s->attrs["axes"] = Attribute::Ints({a});
  }
  Value* out = g.NewValue(v->name + "/last");
  out->dtype = v->dtype;
  out->shape = v->shape;
  (*out->shape)[static_cast<size_t>(a)] = Dim(1);
  s->outputs = {out};
  g.InsertNode(before, std::move(s));
  return out;
}

// A node `op` of the graph's ONNX opset reading `inputs`, placed before `before`; its one
// output is a new value of `dtype` and `shape`.
Value* AddOp(Graph& g, const std::string& op, std::vector<Value*> inputs, DType dtype,
             std::optional<std::vector<Dim>> shape, const std::string& name, Node* before,
             std::map<std::string, Attribute> attrs = {}) {
  auto n = std::make_unique<Node>();
  n->op_type = op;
  n->name = name;
  auto it = g.opsets.find(kOnnxDomain);
  n->opset = it == g.opsets.end() ? 13 : it->second;
  n->inputs = std::move(inputs);
  for (auto& [k, v] : attrs) n->attrs[k] = std::move(v);
  Value* out = g.NewValue(name);
  out->dtype = dtype;
  out->shape = std::move(shape);
  n->outputs = {out};
  g.InsertNode(before, std::move(n));
  return out;
}

Value* Ints(Graph& g, const std::string& name, std::vector<int64_t> v) {
  const auto n = static_cast<int64_t>(v.size());
  return g.AddConstant(name, Tensor::FromInt64(std::move(v), {n}));
}

// The index ([1], int64) of the last real position of `mask`'s first row among the last
// `like`.shape[a] entries: their count of ones - 1 (a mask of any dtype counts through float,
// exact up to 2^24 positions).
Value* MaskedLastIndex(Graph& g, Value* mask, Value* like, int64_t a, Node* before) {
  const std::string p = mask->name + "/last_real";
  const Dim positions = (*like->shape)[static_cast<size_t>(a)];
  const auto rank = static_cast<int64_t>(like->shape->size());
  Value* shape =
      AddOp(g, "Shape", {like}, DType::kInt64, std::vector<Dim>{Dim(rank)}, p + "/shape", before);
  Value* count = AddOp(g, "Slice", {shape, Ints(g, p + "/a", {a}), Ints(g, p + "/a1", {a + 1})},
                       DType::kInt64, std::vector<Dim>{Dim(1)}, p + "/positions", before);
  Value* from =
      AddOp(g, "Neg", {count}, DType::kInt64, std::vector<Dim>{Dim(1)}, p + "/from", before);
  const Dim width = (*mask->shape)[1];
  Value* first = AddOp(g, "Slice", {mask, Ints(g, p + "/r0", {0}), Ints(g, p + "/r1", {1})},
                       mask->dtype, std::vector<Dim>{Dim(1), width}, p + "/row0", before);
  Value* fresh = AddOp(g, "Slice",
                       {first, from, Ints(g, p + "/end", {std::numeric_limits<int64_t>::max()}),
                        Ints(g, p + "/axis", {1})},
                       mask->dtype, std::vector<Dim>{Dim(1), positions}, p + "/new", before);
  Value* real =
      AddOp(g, "Cast", {fresh}, DType::kFloat32, std::vector<Dim>{Dim(1), positions}, p + "/float",
            before, {{"to", Attribute::Int(static_cast<int64_t>(DType::kFloat32))}});
  Value* ones =
      AddOp(g, "ReduceSum", {real, Ints(g, p + "/sum_axis", {1})}, DType::kFloat32,
            std::vector<Dim>{Dim(1)}, p + "/count", before, {{"keepdims", Attribute::Int(0)}});
  Value* last = AddOp(g, "Sub", {ones, g.AddConstant(p + "/one", Tensor::FromFloat({1.0f}, {}))},
                      DType::kFloat32, std::vector<Dim>{Dim(1)}, p + "/minus_one", before);
  return AddOp(g, "Cast", {last}, DType::kInt64, std::vector<Dim>{Dim(1)}, p + "/index", before,
               {{"to", Attribute::Int(static_cast<int64_t>(DType::kInt64))}});
}

// `v` at position `index` ([1]) along `a`, placed before `before`.
Value* GatherAt(Graph& g, Value* v, Value* index, int64_t a, Node* before) {
  std::vector<Dim> shape = *v->shape;
  shape[static_cast<size_t>(a)] = Dim(1);
  return AddOp(g, "Gather", {v, index}, v->dtype, std::move(shape), v->name + "/last_real", before,
               {{"axis", Attribute::Int(a)}});
}

absl::StatusOr<Value*> MaskInput(Graph& g, const std::string& mask) {
  if (mask.empty()) return nullptr;
  Value* m = g.FindValue(mask);
  if (!m || std::find(g.inputs.begin(), g.inputs.end(), m) == g.inputs.end() || RankOf(m) != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", mask, "' is not a rank-2 input of the model: no mask to cut by"));
  }
  auto it = g.opsets.find(kOnnxDomain);
  if (it != g.opsets.end() && it->second < 13) {
    return absl::FailedPreconditionError(
        absl::StrCat("a cut by the mask needs opset 13 or later, not ", it->second));
  }
  return m;
}

}  // namespace

absl::StatusOr<LastPositionCut> CutToLastPosition(Graph& graph, const std::string& output,
                                                  int64_t axis, const std::string& mask) {
  Value* out = graph.FindValue(output);
  if (!out || !graph.IsGraphOutput(out)) {
    return absl::InvalidArgumentError(absl::StrCat("'", output, "' is not an output of the model"));
  }
  RETURN_IF_ERROR(InferShapes(graph));
  if (RankOf(out) <= axis || axis < 0) {
    return absl::InvalidArgumentError(absl::StrCat("output '", output, "' has no axis ", axis));
  }
  ASSIGN_OR_RETURN(Value * by_mask, MaskInput(graph, mask));
  const std::map<Node*, std::vector<Role>> cut =
      out->producer ? CutSet(graph, out->producer, axis) : std::map<Node*, std::vector<Role>>{};
  if (cut.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("output '", output, "' is not computed position by position along axis ", axis,
                     " (by ", out->producer ? out->producer->Describe() : "no node", ")"));
  }
  LastPositionCut result;
  result.by_mask = by_mask != nullptr;
  Value* index = nullptr;  // by the mask: made before the first cut node that reads it
  // The cut nodes in graph order, so that each Slice goes before the first that reads it.
  std::vector<Node*> order;
  for (const auto& n : graph.nodes()) {
    if (cut.count(n.get())) order.push_back(n.get());
  }
  std::unordered_map<Value*, Value*> sliced;
  for (Node* n : order) {
    const std::vector<Role>& roles = cut.at(n);
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      Value* v = n->inputs[i];
      if (!v || roles[i] != Role::kCarried || (v->producer && cut.count(v->producer))) continue;
      auto [it, fresh] = sliced.emplace(v, nullptr);
      if (fresh) {
        if (by_mask && !index) index = MaskedLastIndex(graph, by_mask, v, axis, n);
        it->second = by_mask ? GatherAt(graph, v, index, axis, n) : SliceLast(graph, v, axis, n);
        ++result.slices;
      }
      n->inputs[i] = it->second;
    }
    for (Value* o : n->outputs) {
      if (o && o->shape && RankOf(o) > axis) (*o->shape)[static_cast<size_t>(axis)] = Dim(1);
    }
    ++result.nodes;
    result.products += n->op_type == "MatMul" || n->op_type == "Gemm";
  }
  // Not inferred again: a Slice of a symbolic dim infers as unknown (the dim could be 0),
  // while every size a profile serves is at least 1.
  return result;
}

}  // namespace kiln::shape
