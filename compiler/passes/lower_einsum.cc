#include "compiler/passes/lower_einsum.h"

#include <algorithm>
#include <map>
#include <optional>

#include "ops/nn_einsum.h"

namespace kiln::passes {
namespace {

using Labels = std::vector<int>;

bool Contains(const Labels& labels, int l) {
  return std::find(labels.begin(), labels.end(), l) != labels.end();
}

// The label groups of the product, each in the order the lowering lays its dims out.
struct EinsumSplit {
  Labels batch, left_free, contracted, right_free;
  std::map<int, int64_t> size;
};

// Label sizes from both operands; nullopt when a label repeats within an operand (diagonal),
// when its sizes differ (broadcasting) or when a dim is zero (Reshape would read a 0 target
// dim as "copy the input's").
std::optional<std::map<int, int64_t>> LabelSizes(const ref::nn::EinsumLabels& e,
                                                 const std::vector<std::vector<int64_t>>& dims) {
  std::map<int, int64_t> size;
  for (size_t i = 0; i < 2; ++i) {
    std::map<int, int64_t> own;
    for (size_t d = 0; d < dims[i].size(); ++d) {
      const int l = e.inputs[i][d];
      if (dims[i][d] <= 0 || !own.emplace(l, dims[i][d]).second) return std::nullopt;
      auto [it, fresh] = size.emplace(l, dims[i][d]);
      if (!fresh && it->second != dims[i][d]) return std::nullopt;
    }
  }
  return size;
}

// Batch and free labels in output order (so the final Transpose is often the identity),
// contracted ones in the left operand's order. nullopt for a label summed in one operand.
std::optional<EinsumSplit> Classify(const ref::nn::EinsumLabels& e,
                                    const std::vector<std::vector<int64_t>>& dims) {
  std::optional<std::map<int, int64_t>> size = LabelSizes(e, dims);
  if (!size) return std::nullopt;
  const Labels &a = e.inputs[0], &b = e.inputs[1];
  EinsumSplit s;
  s.size = std::move(*size);
  for (int l : e.output) {
    const bool in_a = Contains(a, l), in_b = Contains(b, l);
    (in_a && in_b ? s.batch : in_a ? s.left_free : s.right_free).push_back(l);
  }
  for (int l : a) {
    if (Contains(e.output, l)) continue;
    if (!Contains(b, l)) return std::nullopt;
    s.contracted.push_back(l);
  }
  for (int l : b) {
    if (!Contains(e.output, l) && !Contains(a, l)) return std::nullopt;
  }
  return s;
}

Labels Concat(std::initializer_list<const Labels*> parts) {
  Labels out;
  for (const Labels* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

int64_t Product(const EinsumSplit& s, const Labels& labels) {
  int64_t p = 1;
  for (int l : labels) p *= s.size.at(l);
  return p;
}

std::vector<int64_t> Sizes(const EinsumSplit& s, const Labels& labels) {
  std::vector<int64_t> out;
  for (int l : labels) out.push_back(s.size.at(l));
  return out;
}

// Inserts the lowered nodes before the Einsum; each step's output is a fresh value with its
// dtype and static shape set, so later passes need no re-inference.
class Emitter {
 public:
  Emitter(Graph& graph, Node& einsum, DType dtype)
      : graph_(graph), einsum_(einsum), dtype_(dtype) {
    hint_ = einsum.name.empty() ? einsum.output(0)->name : einsum.name;
  }

  // x laid out as `from` (labels) transposed to `to`; x itself when the order already is.
  Value* Transpose(Value* x, const Labels& from, const Labels& to, const EinsumSplit& s) {
    if (from == to) return x;
    std::vector<int64_t> perm;
    for (int l : to) perm.push_back(std::find(from.begin(), from.end(), l) - from.begin());
    return Add("Transpose", {x}, {{"perm", Attribute::Ints(perm)}}, Sizes(s, to));
  }

  Value* Reshape(Value* x, const std::vector<int64_t>& from, const std::vector<int64_t>& to) {
    if (from == to) return x;
    const int64_t rank = static_cast<int64_t>(to.size());
    Value* target = graph_.AddConstant(hint_ + "_shape", Tensor::FromInt64(to, {rank}));
    return Add("Reshape", {x, target}, {}, to);
  }

  Value* Add(const std::string& op, std::vector<Value*> inputs,
             std::map<std::string, Attribute> attrs, const std::vector<int64_t>& dims) {
    Value* out = graph_.NewValue(hint_ + "_" + op);
    out->dtype = dtype_;
    out->shape = ToShape(dims);
    auto n = std::make_unique<Node>();
    n->op_type = op;
    n->name = out->name;  // unique, like the value
    n->opset = einsum_.opset;  // >= 12 (Einsum's first version): every op used exists
    n->inputs = std::move(inputs);
    n->outputs = {out};
    n->attrs = std::move(attrs);
    last_ = graph_.InsertNode(&einsum_, std::move(n));
    return out;
  }

  // The last node added takes over the Einsum's output value (its name may be a graph
  // output) and the Einsum goes.
  void Finish() {
    Value* y = einsum_.outputs[0];
    last_->outputs[0] = y;
    y->producer = last_;
    einsum_.outputs[0] = nullptr;
    graph_.RemoveNode(&einsum_);
  }

 private:
  Graph& graph_;
  Node& einsum_;
  DType dtype_;
  std::string hint_;
  Node* last_ = nullptr;
};

void Lower(Graph& graph, Node& einsum, const ref::nn::EinsumLabels& e, const EinsumSplit& s) {
  Emitter emit(graph, einsum, einsum.input(0)->dtype);
  const std::vector<int64_t> batch = Sizes(s, s.batch);
  auto with_batch = [&batch](std::vector<int64_t> tail) {
    tail.insert(tail.begin(), batch.begin(), batch.end());
    return tail;
  };
  const int64_t m = Product(s, s.left_free), k = Product(s, s.contracted),
                n = Product(s, s.right_free);
  const Labels a_order = Concat({&s.batch, &s.left_free, &s.contracted});
  const Labels b_order = Concat({&s.batch, &s.contracted, &s.right_free});
  Value* a = emit.Transpose(einsum.input(0), e.inputs[0], a_order, s);
  a = emit.Reshape(a, Sizes(s, a_order), with_batch({m, k}));
  Value* b = emit.Transpose(einsum.input(1), e.inputs[1], b_order, s);
  b = emit.Reshape(b, Sizes(s, b_order), with_batch({k, n}));
  Value* y = emit.Add("MatMul", {a, b}, {}, with_batch({m, n}));
  const Labels y_order = Concat({&s.batch, &s.left_free, &s.right_free});
  y = emit.Reshape(y, with_batch({m, n}), Sizes(s, y_order));
  emit.Transpose(y, y_order, e.output, s);
  emit.Finish();
}

// The operands' static dims when the Einsum is one this pass lowers, else nullopt.
std::optional<std::vector<std::vector<int64_t>>> LowerableOperands(const Node& n) {
  if (!n.domain.empty() || n.op_type != "Einsum" || n.inputs.size() != 2) return std::nullopt;
  const Value *a = n.input(0), *b = n.input(1), *y = n.output(0);
  if (!a || !b || !y || a->dtype != b->dtype || !IsFloatDType(a->dtype)) return std::nullopt;
  if (!a->shape || !b->shape || !IsStatic(*a->shape) || !IsStatic(*b->shape)) {
    return std::nullopt;
  }
  return std::vector<std::vector<int64_t>>{StaticDims(*a->shape), StaticDims(*b->shape)};
}

bool LowerOne(Graph& graph, Node& n) {
  std::optional<std::vector<std::vector<int64_t>>> dims = LowerableOperands(n);
  if (!dims) return false;
  const std::vector<int64_t> ranks = {static_cast<int64_t>((*dims)[0].size()),
                                      static_cast<int64_t>((*dims)[1].size())};
  // A malformed equation is the Einsum kernel's to report, not this pass's.
  absl::StatusOr<ref::nn::EinsumLabels> e = ref::nn::ParseEinsum(n, ranks);
  if (!e.ok()) return false;
  std::optional<EinsumSplit> s = Classify(*e, *dims);
  if (!s) return false;
  Lower(graph, n, *e, *s);
  return true;
}

}  // namespace

absl::StatusOr<bool> LowerEinsum(Graph& graph) {
  // A snapshot: lowering inserts nodes before the Einsum and removes only the Einsum.
  std::vector<Node*> nodes;
  for (const auto& n : graph.nodes()) nodes.push_back(n.get());
  bool changed = false;
  for (Node* n : nodes) changed = LowerOne(graph, *n) || changed;
  if (changed) graph.PruneUnusedValues();
  return changed;
}

}  // namespace kiln::passes
