#include "server/model/mask_positions.h"

#include <iterator>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/shape/infer.h"
#include "server/model/cache_mask_graph.h"
#include "server/model/cache_mask_proof.h"

namespace kiln::server {
namespace {

using generate::DecoderContract;
using mask_graph::CastTo;
using mask_graph::Ints;
using mask_graph::Op;

// The values (by name, which a clone keeps) that start a Range and are the cache's length at
// every probe, with their integer dtype (the imported graph's types are inferred only on its
// specialized clones).
absl::StatusOr<std::map<std::string, DType>> LengthStarts(const Graph& g,
                                                          const DecoderContract& c) {
  std::map<std::string, DType> starts;
  for (const auto& n : g.nodes()) {
    const Value* s = n->input(0);
    if (n->op_type == "Range" && n->domain.empty() && s && !s->constant) {
      starts.emplace(s->name, DType::kInt64);
    }
  }
  for (const mask_graph::Probe& p : mask_graph::kProbes) {
    if (starts.empty()) break;
    std::unique_ptr<Graph> at = g.Clone();
    RETURN_IF_ERROR(
        shape::Specialize(*at, p.batch, {{c.past_symbol, p.past}, {c.sequence_symbol, p.seq}}));
    for (auto it = starts.begin(); it != starts.end();) {
      const Value* v = at->FindValue(it->first);
      const bool is_past = v && v->constant && v->constant->numel() == 1 &&
                           IsIntegerDType(v->constant->dtype()) && v->constant->GetInt(0) == p.past;
      if (is_past) it->second = v->constant->dtype();
      it = is_past ? std::next(it) : starts.erase(it);
    }
  }
  return starts;
}

// int64 scalar: one past the last cached column the batch's first row holds real, 0 when it
// holds none (or the cache is empty). The first row alone, as the added mask's count is
// (cache_mask.h): the other rows' masks then change nothing of a row's, which the warm-up
// check's rows of another feed beside the checked ones rely on.
Value* Extent(Graph& g, const DecoderContract& c) {
  const generate::CacheTensor& t = c.cache.front();
  Value* zero = Ints(g, {0});
  Value* past =
      Op(g, "Slice",
         {Op(g, "Shape", {g.inputs[t.input]}), Ints(g, {t.axis}), Ints(g, {t.axis + 1}), zero});
  Value* ends = Op(g, "Concat", {Ints(g, {1}), past}, {{"axis", Attribute::Int(0)}});
  Value* real = Op(g, "Slice",
                   {mask_graph::Real(g, g.inputs[c.attention_mask]), Ints(g, {0, 0}), ends,
                    Ints(g, {0, 1})});  // [1, past]
  Value* one = g.AddConstant("kiln_mask_one", Tensor::Scalar(DType::kInt64, 1.0));
  Value* last = Op(g, "Add", {Op(g, "Squeeze", {past, zero}), one});
  Value* columns = CastTo(g, Op(g, "Range", {one, last, one}), DType::kFloat32);  // 1 .. past
  // A zero column after the cache: the extent of an empty one (or of one all hidden) is 0.
  Value* held = Op(g, "Pad", {Op(g, "Mul", {real, columns}), Ints(g, {0, 0, 0, 1})});
  return CastTo(g, Op(g, "ReduceMax", {held}, {{"keepdims", Attribute::Int(0)}}), DType::kInt64);
}

// The graph with every Range started at `starts` started at the mask's extent instead, its
// length kept.
absl::StatusOr<std::unique_ptr<Graph>> Rewrite(const Graph& graph, const DecoderContract& c,
                                               const std::map<std::string, DType>& starts) {
  std::unique_ptr<Graph> g = graph.Clone();
  Value* extent = Extent(*g, c);
  std::vector<Node*> ranges;
  for (const auto& n : g->nodes()) {
    if (n->op_type == "Range" && n->domain.empty() && n->input(0) &&
        starts.count(n->input(0)->name)) {
      ranges.push_back(n.get());
    }
  }
  for (Node* n : ranges) {
    Value* start = n->input(0);
    const DType dtype = starts.at(start->name);
    Value* from = dtype == DType::kInt64 ? extent : CastTo(*g, extent, dtype);
    // limit - start is a constant once the sizes are bound, so the Range keeps a static
    // length (its shape rule: a limit of start + k).
    Value* length = Op(*g, "Sub", {n->input(1), start});
    n->inputs[0] = from;
    n->inputs[1] = Op(*g, "Add", {from, length});
  }
  if (!g->TopologicalSort()) return absl::InternalError("the rewritten decoder has a cycle");
  return g;
}

}  // namespace

absl::StatusOr<CacheMaskOutcome> ReadPositionsFromMask(Graph& graph, const DecoderContract& c,
                                                       const ModelConfig& config) {
  CacheMaskOutcome out;
  if (!c.has_mask() || c.has_positions() || c.cache.empty() ||
      config.generation.cache_mask == "off") {
    return out;
  }
  ASSIGN_OR_RETURN(const auto starts, LengthStarts(graph, c));
  if (starts.empty()) return out;
  // A model that pads as it is (the Range feeds nothing the outputs show) needs nothing, and
  // keeps rows of any lengths in one step.
  if (ProveCacheMask(graph, graph, c, /*rows_share_length=*/false, config).ok()) return out;
  ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, Rewrite(graph, c, starts));
  if (absl::Status proof = ProveCacheMask(graph, *g, c, /*rows_share_length=*/true, config);
      !proof.ok()) {
    out.refused = absl::StrCat("positions read from the attention mask do not reproduce the ",
                               "model (", proof.message(), ")");
    return out;
  }
  graph = std::move(*g);
  out.mask = graph.inputs[c.attention_mask]->name;
  out.positions_from_mask = true;
  out.rows_share_length = true;
  out.past_symbol = c.past_symbol;
  return out;
}

absl::Status CheckLastCachedReal(const Tensor& mask, int64_t past) {
  if (mask.rank() != 2 || past > mask.dim(1)) {
    return absl::InvalidArgumentError("the attention mask is not [rows, past + new positions]");
  }
  if (past == 0 || mask.dim(0) == 0 || mask.GetDouble(past - 1) != 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "attention_mask: row 0 hides its last cached position (column ", past - 1,
      "); this model counts its positions from its cache's length, which the server reads "
      "from row 0's last real cached position: put a row that holds it first, or send the "
      "cache without its masked tail"));
}

}  // namespace kiln::server
