#include "compiler/passes/fold_channel_shuffle.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "compiler/passes/exclusive_producer.h"

namespace kiln::passes {
namespace {

bool IsOnnx(const Node* n, const char* op) { return n && n->domain.empty() && n->op_type == op; }

std::optional<std::vector<int64_t>> StaticShapeOf(const Value* v) {
  if (!v || !v->shape || !IsStatic(*v->shape)) return std::nullopt;
  return StaticDims(*v->shape);
}

// The axis a at which `split` is `shape` with dim a written as two (split[a] * split[a + 1]
// == shape[a], every other dim equal); nullopt when there is none.
std::optional<int64_t> SplitAxis(const std::vector<int64_t>& shape,
                                 const std::vector<int64_t>& split) {
  if (split.size() != shape.size() + 1) return std::nullopt;
  for (size_t a = 0; a < shape.size(); ++a) {
    if (!std::equal(shape.begin(), shape.begin() + a, split.begin())) return std::nullopt;
    if (split[a] * split[a + 1] == shape[a] &&
        std::equal(shape.begin() + a + 1, shape.end(), split.begin() + a + 2)) {
      return static_cast<int64_t>(a);
    }
  }
  return std::nullopt;
}

// Turns `node` into Gather(x, idx, axis); its output value stays (same shape).
void MakeGather(Graph& graph, Node& node, Value* x, const std::vector<int64_t>& idx, int64_t axis) {
  Value* indices = graph.AddConstant(node.output(0)->name + "_gather_indices",
                                     Tensor::FromInt64(idx, {static_cast<int64_t>(idx.size())}));
  node.op_type = "Gather";
  node.domain.clear();
  node.opset = std::max<int64_t>(node.opset, 13);
  node.attrs.clear();
  node.attrs["axis"] = Attribute::Int(axis);
  node.inputs = {x, indices};
}

// Reshape(Transpose(Reshape(x))) swapping the two halves of one split axis, back to x's shape.
bool FoldShuffle(Graph& graph, Node& r2) {
  if (!IsOnnx(&r2, "Reshape")) return false;
  Node* t = ExclusiveProducer(graph, r2);
  if (!IsOnnx(t, "Transpose")) return false;
  Node* r1 = ExclusiveProducer(graph, *t);
  if (!IsOnnx(r1, "Reshape")) return false;
  Value* x = r1->input(0);
  const auto xs = StaticShapeOf(x), split = StaticShapeOf(r1->output(0));
  const auto out = StaticShapeOf(r2.output(0));
  if (!xs || !split || !out || *out != *xs) return false;
  const std::optional<int64_t> a = SplitAxis(*xs, *split);
  if (!a) return false;
  const std::vector<int64_t> perm = t->GetInts("perm");
  if (perm.size() != split->size()) return false;
  for (int64_t i = 0; i < static_cast<int64_t>(perm.size()); ++i) {
    const int64_t want = i == *a ? *a + 1 : i == *a + 1 ? *a : i;
    if (perm[i] != want) return false;
  }
  const int64_t g = (*split)[*a], q = (*split)[*a + 1];
  std::vector<int64_t> idx(static_cast<size_t>(g * q));
  for (int64_t j = 0; j < q; ++j) {
    for (int64_t i = 0; i < g; ++i) idx[j * g + i] = i * q + j;
  }
  MakeGather(graph, r2, x, idx, *a);
  graph.RemoveNode(t);
  graph.RemoveNode(r1);
  return true;
}

// A Gather's constant 1-D indices made non-negative, and its axis; nullopt otherwise.
std::optional<std::vector<int64_t>> ConstantIndices(const Node& gather, int64_t* axis) {
  const Value* x = gather.input(0);
  const Value* i = gather.input(1);
  if (!IsOnnx(&gather, "Gather") || !x || !x->shape || !i || !i->constant ||
      i->constant->shape().size() != 1) {
    return std::nullopt;
  }
  const int64_t rank = static_cast<int64_t>(x->shape->size());
  *axis = gather.GetInt("axis", 0);
  if (*axis < 0) *axis += rank;
  const auto xs = StaticShapeOf(x);
  if (!xs || *axis < 0 || *axis >= rank) return std::nullopt;
  const int64_t dim = (*xs)[*axis];
  std::vector<int64_t> idx = i->constant->ToInt64Vector();
  for (int64_t& v : idx) {
    if (v < 0) v += dim;
    if (v < 0 || v >= dim) return std::nullopt;
  }
  return idx;
}

// The positions ONNX's Slice keeps of a dim of size `dim`.
std::vector<int64_t> SlicePositions(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  std::vector<int64_t> pos;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    for (int64_t p = start; p < end; p += step) pos.push_back(p);
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    for (int64_t p = start; p > end; p += step) pos.push_back(p);
  }
  return pos;
}

// Slice(data, starts, ends[, axes[, steps]]) of one axis with constant bounds: that axis
// (normalized) and the positions it keeps of a dim of size `dim`.
std::optional<std::vector<int64_t>> SliceOfOneAxis(const Node& s, int64_t rank, int64_t dim_of_axis,
                                                   int64_t axis) {
  auto constant = [&](size_t i) -> std::optional<std::vector<int64_t>> {
    const Value* v = s.input(i);
    if (!v || !v->constant) return std::nullopt;
    return v->constant->ToInt64Vector();
  };
  if (s.opset < 10) return std::nullopt;  // the attribute form: left to the kernel
  const auto starts = constant(1), ends = constant(2);
  std::optional<std::vector<int64_t>> axes = s.input(3) ? constant(3) : std::vector<int64_t>{};
  std::optional<std::vector<int64_t>> steps = s.input(4) ? constant(4) : std::vector<int64_t>{};
  if (!starts || !ends || !axes || !steps || starts->size() != 1 || ends->size() != 1) {
    return std::nullopt;
  }
  const int64_t a = axes->empty() ? 0 : (*axes)[0] < 0 ? (*axes)[0] + rank : (*axes)[0];
  const int64_t step = steps->empty() ? 1 : (*steps)[0];
  if (axes->size() > 1 || steps->size() > 1 || a != axis || step == 0) return std::nullopt;
  if (axes->empty() && rank != 1) return std::nullopt;  // all axes, one bound: rank 1 only
  return SlicePositions(dim_of_axis, (*starts)[0], (*ends)[0], step);
}

// Slice or Gather reading a Gather with constant indices along that Gather's axis.
bool FoldReaderOfGather(Graph& graph, Node& n) {
  const bool slice = IsOnnx(&n, "Slice");
  if (!slice && !IsOnnx(&n, "Gather")) return false;
  const Value* y = n.input(0);
  Node* g = y ? y->producer : nullptr;
  int64_t axis = 0;
  std::optional<std::vector<int64_t>> inner = g ? ConstantIndices(*g, &axis) : std::nullopt;
  if (!inner) return false;
  const int64_t rank = static_cast<int64_t>(y->shape ? y->shape->size() : 0);
  std::optional<std::vector<int64_t>> outer;
  if (slice) {
    outer = SliceOfOneAxis(n, rank, static_cast<int64_t>(inner->size()), axis);
  } else {
    int64_t outer_axis = 0;
    outer = ConstantIndices(n, &outer_axis);
    if (outer_axis != axis) return false;
  }
  if (!outer) return false;
  std::vector<int64_t> idx;
  for (int64_t p : *outer) idx.push_back((*inner)[static_cast<size_t>(p)]);
  MakeGather(graph, n, g->input(0), idx, axis);
  return true;
}

// Split of a Gather with constant indices along that Gather's axis: one Gather per output
// (its part's indices, read off the outputs' static sizes in order) from the Gather's source.
bool FoldSplitOfGather(Graph& graph, Node& split) {
  if (!IsOnnx(&split, "Split")) return false;
  const Value* y = split.input(0);
  Node* g = y ? y->producer : nullptr;
  int64_t axis = 0;
  const std::optional<std::vector<int64_t>> idx = g ? ConstantIndices(*g, &axis) : std::nullopt;
  if (!idx || !y->shape) return false;
  const int64_t rank = static_cast<int64_t>(y->shape->size());
  int64_t split_axis = split.GetInt("axis", 0);
  if (split_axis < 0) split_axis += rank;
  if (split_axis != axis) return false;
  std::vector<int64_t> sizes;
  for (const Value* out : split.outputs) {
    const auto dims = StaticShapeOf(out);
    if (!dims || static_cast<int64_t>(dims->size()) != rank) return false;
    sizes.push_back((*dims)[axis]);
  }
  if (std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) > static_cast<int64_t>(idx->size())) {
    return false;
  }
  int64_t begin = 0;
  // Each part's Gather, placed where the Split was.
  Value* source = g->input(0);
  std::vector<Value*> outs = split.outputs;
  for (size_t k = 0; k < outs.size(); ++k) {
    auto part = std::make_unique<Node>();
    part->name = split.name + "_gather" + std::to_string(k);
    part->opset = split.opset;
    part->outputs = {outs[k]};
    Node* placed = graph.InsertNode(&split, std::move(part));
    MakeGather(graph, *placed, source,
               std::vector<int64_t>(idx->begin() + begin, idx->begin() + begin + sizes[k]), axis);
    begin += sizes[k];
  }
  graph.RemoveNode(&split);  // its outputs' producers are the Gathers now
  return true;
}

}  // namespace

absl::StatusOr<bool> FoldChannelShuffle(Graph& graph) {
  // A snapshot in schedule order: a shuffle is folded at its last Reshape (removing only
  // nodes before it), and its readers, visited later, then see the Gather.
  std::vector<Node*> nodes;
  for (const auto& n : graph.nodes()) nodes.push_back(n.get());
  bool changed = false;
  for (Node* n : nodes) {
    changed = FoldShuffle(graph, *n) || FoldReaderOfGather(graph, *n) ||
              FoldSplitOfGather(graph, *n) || changed;
  }
  if (!changed) return false;
  // A Gather whose every reader now reads its source is dead.
  std::vector<Node*> dead;
  for (const auto& n : graph.nodes()) {
    if (IsOnnx(n.get(), "Gather") && !graph.IsGraphOutput(n->output(0)) &&
        graph.Consumers(n->output(0)).empty()) {
      dead.push_back(n.get());
    }
  }
  for (Node* n : dead) graph.RemoveNode(n);
  graph.PruneUnusedValues();
  return true;
}

}  // namespace kiln::passes
