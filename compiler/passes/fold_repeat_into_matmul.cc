#include "compiler/passes/fold_repeat_into_matmul.h"

#include <memory>
#include <optional>

#include "ir/kiln_ops.h"

namespace kiln::passes {
namespace {

bool IsProduct(const Node& n) {
  return (n.domain.empty() && n.op_type == "MatMul") ||
         (n.domain == kKilnDomain && n.op_type == kiln_ops::kFusedMatMul);
}

bool Is(const Node* n, const char* op) { return n && n->domain.empty() && n->op_type == op; }

std::optional<std::vector<int64_t>> Dims(const Value* v) {
  if (!v || !v->shape || !IsStatic(*v->shape)) return std::nullopt;
  std::vector<int64_t> d = StaticDims(*v->shape);
  for (int64_t x : d) {
    if (x <= 0) return std::nullopt;  // a 0 in a Reshape's shape means "copy"
  }
  return d;
}

// A repeated operand: the Unsqueeze's output ([.., G, 1, ..]), the axis a of the 1 and the
// repeat R; nullopt when `v` is no such Reshape(Expand(Unsqueeze(t))).
struct Repeat {
  Value* source = nullptr;  // t, before the Unsqueeze
  Value* unsqueezed = nullptr;
  size_t axis = 0;
  int64_t times = 1;
  int64_t reshape_opset = 13;
};

std::optional<Repeat> RepeatOf(const Value* v) {
  const Node* r = v ? v->producer : nullptr;
  if (!Is(r, "Reshape") || !r->input(0)) return std::nullopt;
  const Node* e = r->input(0)->producer;
  if (!Is(e, "Expand") || !e->input(0) || !Is(e->input(0)->producer, "Unsqueeze")) {
    return std::nullopt;
  }
  Value* u = e->input(0);
  const auto t = Dims(u->producer->input(0)), ud = Dims(u), ed = Dims(e->output(0)), rd = Dims(v);
  if (!t || !ud || !ed || !rd || ud->size() != t->size() + 1 || ed->size() != ud->size() ||
      rd->size() != t->size() || t->size() < 3) {
    return std::nullopt;
  }
  // The inserted axis: where the Unsqueeze's output stops following t.
  size_t a = 0;
  while (a < t->size() && (*ud)[a] == (*t)[a]) ++a;
  if ((*ud)[a] != 1 || a == 0 || a + 3 > ud->size()) return std::nullopt;  // a batch axis
  for (size_t i = a; i < t->size(); ++i) {
    if ((*ud)[i + 1] != (*t)[i]) return std::nullopt;
  }
  for (size_t i = 0; i < ud->size(); ++i) {
    if (i != a && (*ed)[i] != (*ud)[i]) return std::nullopt;  // only the new axis widens
  }
  // The Reshape merges axes a - 1 and a, nothing else.
  std::vector<int64_t> merged(ed->begin(), ed->end());
  merged[a - 1] *= merged[a];
  merged.erase(merged.begin() + static_cast<std::ptrdiff_t>(a));
  if (merged != *rd) return std::nullopt;
  return Repeat{u->producer->input(0), u, a, (*ed)[a],
                r->opset >= 5 ? r->opset : 13};  // shape as an input
}

// A Reshape of `in` to `dims` named after `hint`, its output made here.
std::unique_ptr<Node> MakeReshape(Graph& g, Value* in, const std::vector<int64_t>& dims,
                                  const std::string& hint, int64_t opset, Value* out) {
  Tensor shape(DType::kInt64, {static_cast<int64_t>(dims.size())});
  for (size_t i = 0; i < dims.size(); ++i) shape.SetInt(static_cast<int64_t>(i), dims[i]);
  auto n = std::make_unique<Node>();
  n->op_type = "Reshape";
  n->name = hint + "_reshape";
  n->opset = opset;
  n->inputs = {in, g.AddConstant(hint + "_shape", std::move(shape))};
  if (!out) {
    out = g.NewValue(hint);
    out->dtype = in->dtype;
    out->shape = ToShape(dims);
  }
  n->outputs = {out};
  return n;
}

// [.., G * R, S, ..] -> [.., G, R * S, ..] at axes a - 1 and a.
std::vector<int64_t> Group(std::vector<int64_t> dims, size_t a, int64_t times) {
  dims[a - 1] /= times;
  dims[a] *= times;
  return dims;
}

bool FoldOne(Graph& g, Node& n) {
  if (n.inputs.size() != 2 || n.GetInt("transA", 0) != 0) return false;
  const std::optional<Repeat> rep = RepeatOf(n.input(1));
  Value* a_in = n.input(0);
  Value* y = n.output(0);
  const auto ad = Dims(a_in), yd = Dims(y), bd = Dims(n.input(1));
  // The repeat right before the matrix axes: [.., G, R, rows, cols] with A's rows after R.
  if (!rep || !ad || !yd || ad->size() != bd->size() || yd->size() != ad->size() ||
      rep->axis + 2 != ad->size() || (*ad)[rep->axis - 1] != (*bd)[rep->axis - 1]) {
    return false;
  }
  // A's heads grouped by key/value head, each group's rows stacked; the product then reads
  // t itself, and its output is ungrouped back: both reshapes are views.
  std::unique_ptr<Node> group = MakeReshape(g, a_in, Group(*ad, rep->axis, rep->times),
                                            n.name + "_grouped", rep->reshape_opset, nullptr);
  Value* stacked = g.NewValue(n.name + "_stacked");
  stacked->dtype = y->dtype;
  stacked->shape = ToShape(Group(*yd, rep->axis, rep->times));
  n.inputs[0] = group->outputs[0];
  n.inputs[1] = rep->source;
  n.outputs[0] = stacked;
  stacked->producer = &n;
  std::unique_ptr<Node> merge =
      MakeReshape(g, stacked, *yd, n.name + "_merged", rep->reshape_opset, y);
  Node* next = nullptr;
  const auto& nodes = g.nodes();
  for (size_t i = 0; i + 1 < nodes.size(); ++i) {
    if (nodes[i].get() == &n) next = nodes[i + 1].get();
  }
  g.InsertNode(&n, std::move(group));
  g.InsertNode(next, std::move(merge));
  return true;
}

}  // namespace

absl::StatusOr<bool> FoldRepeatIntoMatMul(Graph& graph) {
  std::vector<Node*> products;
  for (const auto& node : graph.nodes()) {
    if (IsProduct(*node)) products.push_back(node.get());
  }
  bool changed = false;
  for (Node* n : products) changed = FoldOne(graph, *n) || changed;
  if (changed) graph.PruneUnusedValues();
  return changed;
}

}  // namespace kiln::passes
