#include "server/model/cache_mask_graph.h"

#include <algorithm>
#include <iterator>
#include <memory>
#include <utility>

#include "compiler/shape/infer.h"

namespace kiln::server::mask_graph {

Value* Op(Graph& g, const std::string& op, std::vector<Value*> in,
          std::map<std::string, Attribute> attrs) {
  Value* out = g.NewValue("kiln_mask_" + op);
  Node* n = g.AddNode(op, std::move(in), {out});
  n->attrs = std::move(attrs);
  return out;
}

Value* Ints(Graph& g, std::vector<int64_t> v) {
  const auto n = static_cast<int64_t>(v.size());
  return g.AddConstant("kiln_mask_ints", Tensor::FromInt64(v, {n}));
}

Value* CastTo(Graph& g, Value* x, DType to) {
  return Op(g, "Cast", {x}, {{"to", Attribute::Int(static_cast<int64_t>(to))}});
}

Value* Real(Graph& g, Value* mask) {
  Value* zero = g.AddConstant("kiln_mask_zero", Tensor::Scalar(DType::kFloat32, 0.0));
  Value* as_float = mask->dtype == DType::kFloat32 ? mask : CastTo(g, mask, DType::kFloat32);
  return CastTo(g, Op(g, "Not", {Op(g, "Equal", {as_float, zero})}), DType::kFloat32);
}

absl::StatusOr<const std::vector<std::unique_ptr<Graph>>*> Probed::Graphs() {
  if (at_.empty()) {
    for (const Probe& p : kProbes) {
      std::unique_ptr<Graph> at = graph_.Clone();
      RETURN_IF_ERROR(shape::Specialize(
          *at, p.batch, {{contract_.past_symbol, p.past}, {contract_.sequence_symbol, p.seq}}));
      at_.push_back(std::move(at));
    }
  }
  return &at_;
}

absl::StatusOr<std::map<std::string, DType>> LengthStarts(const Graph& g, Probed& probed) {
  std::map<std::string, DType> starts;
  for (const auto& n : g.nodes()) {
    const Value* s = n->input(0);
    if (n->op_type == "Range" && n->domain.empty() && s && !s->constant) {
      starts.emplace(s->name, DType::kInt64);
    }
  }
  if (starts.empty()) return starts;
  ASSIGN_OR_RETURN(const std::vector<std::unique_ptr<Graph>>* at, probed.Graphs());
  for (size_t i = 0; i < at->size(); ++i) {
    for (auto it = starts.begin(); it != starts.end();) {
      const Value* v = (*at)[i]->FindValue(it->first);
      const bool is_past = v && v->constant && v->constant->numel() == 1 &&
                           IsIntegerDType(v->constant->dtype()) &&
                           v->constant->GetInt(0) == kProbes[i].past;
      if (is_past) it->second = v->constant->dtype();
      it = is_past ? std::next(it) : starts.erase(it);
    }
  }
  return starts;
}

Value* CacheLength(Graph& g, const generate::DecoderContract& c) {
  const generate::CacheTensor& t = c.cache.front();
  return Op(g, "Slice",
            {Op(g, "Shape", {g.inputs[t.input]}), Ints(g, {t.axis}), Ints(g, {t.axis + 1}),
             Ints(g, {0})});
}

Value* PastColumns(Graph& g, Value* real, Value* past, bool first_row) {
  if (!first_row) return Op(g, "Slice", {real, Ints(g, {0}), past, Ints(g, {1})});
  Value* ends = Op(g, "Concat", {Ints(g, {1}), past}, {{"axis", Attribute::Int(0)}});
  return Op(g, "Slice", {real, Ints(g, {0, 0}), ends, Ints(g, {0, 1})});
}

namespace {

// Whether `u` makes positions [1, n] of `range`'s output: an Unsqueeze of axis 0.
bool MakesRowOfPositions(const Node& u, const Value* range_out) {
  const Value* axes = u.input(1);
  if (u.op_type != "Unsqueeze" || !u.domain.empty() || u.input(0) != range_out || !axes ||
      !axes->constant || axes->constant->numel() != 1) {
    return false;
  }
  const int64_t axis = axes->constant->GetInt(0);
  return axis == 0 || axis == -2;
}

}  // namespace

bool PerRowPositions(Graph& g, Value* row_starts, const std::map<std::string, DType>& starts) {
  std::vector<std::pair<Node*, Node*>> found;  // a Range, an Unsqueeze of it to [1, n]
  for (Node* n : NodesReading(g, "Range", starts)) {
    for (Node* u : g.Consumers(n->output(0))) {
      if (MakesRowOfPositions(*u, n->output(0))) found.emplace_back(n, u);
    }
  }
  for (const auto& [range, unsqueeze] : found) {
    Value* start = range->input(0);
    const DType dtype = starts.at(start->name);
    Value* zero = g.AddConstant("kiln_mask_zero", Tensor::Scalar(dtype, 0.0));
    // limit - start is a constant once the sizes are bound: the offsets fold.
    Value* offsets =
        Op(g, "Range", {zero, Op(g, "Sub", {range->input(1), start}), range->input(2)});
    Value* from = dtype == DType::kInt64 ? row_starts : CastTo(g, row_starts, dtype);
    g.ReplaceAllUses(unsqueeze->output(0), Op(g, "Add", {from, offsets}));
  }
  return !found.empty();
}

}  // namespace kiln::server::mask_graph
