#include "server/model/mask_positions.h"

#include <algorithm>
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

// One past the last cached column a row holds real, 0 when it holds none (or the cache is
// empty): int64 [rows, 1] for every row, or a scalar for the batch's first row alone (the
// other rows then change nothing of a row's, which the warm-up check's rows of another feed
// beside the checked ones rely on).
Value* Extent(Graph& g, const DecoderContract& c, bool first_row) {
  Value* past = mask_graph::CacheLength(g, c);
  Value* real = mask_graph::PastColumns(g, mask_graph::Real(g, g.inputs[c.attention_mask]), past,
                                        first_row);  // [rows, past]
  Value* one = g.AddConstant("kiln_mask_one", Tensor::Scalar(DType::kInt64, 1.0));
  Value* last = Op(g, "Add", {Op(g, "Squeeze", {past, Ints(g, {0})}), one});
  Value* columns = CastTo(g, Op(g, "Range", {one, last, one}), DType::kFloat32);  // 1 .. past
  // A zero column after the cache: the extent of an empty one (or of one all hidden) is 0.
  Value* held = Op(g, "Pad", {Op(g, "Mul", {real, columns}), Ints(g, {0, 0, 0, 1})});
  Value* most = first_row
                    ? Op(g, "ReduceMax", {held}, {{"keepdims", Attribute::Int(0)}})
                    : Op(g, "ReduceMax", {held, Ints(g, {1})}, {{"keepdims", Attribute::Int(1)}});
  return CastTo(g, most, DType::kInt64);
}

// The graph with its positions read from the mask: each row's own (`per_row`: positions [1, n]
// made of a Range become [rows, n]; FAILED_PRECONDITION where there are none), or the
// first row's for all, every Range started at `starts` started at its extent instead, its
// length kept.
absl::StatusOr<std::unique_ptr<Graph>> Rewrite(const Graph& graph, const DecoderContract& c,
                                               const std::map<std::string, DType>& starts,
                                               bool per_row) {
  std::unique_ptr<Graph> g = graph.Clone();
  Value* extent = Extent(*g, c, /*first_row=*/!per_row);
  if (per_row) {
    if (!mask_graph::PerRowPositions(*g, extent, starts)) {
      return absl::FailedPreconditionError(
          "no Range over the cache's length is made positions [1, n]");
    }
  } else {
    for (Node* n : mask_graph::NodesReading(*g, "Range", starts)) {
      Value* start = n->input(0);
      const DType dtype = starts.at(start->name);
      Value* from = dtype == DType::kInt64 ? extent : CastTo(*g, extent, dtype);
      // limit - start is a constant once the sizes are bound, so the Range keeps a static
      // length (its shape rule: a limit of start + k).
      Value* length = Op(*g, "Sub", {n->input(1), start});
      n->inputs[0] = from;
      n->inputs[1] = Op(*g, "Add", {from, length});
    }
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
  mask_graph::Probed probed(graph, c);
  ASSIGN_OR_RETURN(const auto starts, mask_graph::LengthStarts(graph, probed));
  if (starts.empty()) return out;
  // A model that pads as it is (the Range feeds nothing the outputs show) needs nothing, and
  // keeps rows of any lengths in one step.
  CacheMaskProver prover(graph, c, config);
  if (prover.Prove(graph, /*rows_share_length=*/false).ok()) return out;
  // Each row's positions first (rows of any lengths share a step), then the first row's.
  std::string why;
  for (bool per_row : {true, false}) {
    absl::StatusOr<std::unique_ptr<Graph>> g = Rewrite(graph, c, starts, per_row);
    absl::Status proof = g.ok() ? prover.Prove(**g, !per_row) : g.status();
    if (proof.ok()) {
      graph = std::move(**g);
      out.mask = graph.inputs[c.attention_mask]->name;
      out.positions_from_mask = true;
      out.per_row = per_row;
      out.rows_share_length = !per_row;
      out.past_symbol = c.past_symbol;
      return out;
    }
    if (per_row) why = absl::StrCat("each row's: ", proof.message(), "; ");
    if (!per_row) absl::StrAppend(&why, "the first row's: ", proof.message());
  }
  out.refused = absl::StrCat("positions read from the attention mask do not reproduce the ",
                             "model (", why, ")");
  return out;
}

absl::Status CheckLastCachedReal(const Tensor& mask, int64_t past, bool every_row) {
  RETURN_IF_ERROR(CheckMaskSpansPast(mask, past));
  if (past == 0) return absl::OkStatus();
  const int64_t rows = every_row ? mask.dim(0) : std::min<int64_t>(mask.dim(0), 1);
  for (int64_t r = 0; r < rows; ++r) {
    if (mask.GetDouble(r * mask.dim(1) + past - 1) != 0) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "attention_mask: row ", r, " hides its last cached position (column ", past - 1,
        "); this model counts its positions from its cache's length, which the server reads "
        "from ",
        every_row ? "each row's last real cached position: pad a row's cache on the left"
                  : "row 0's last real cached position: put a row that holds it first",
        ", or send the cache without its masked tail"));
  }
  return absl::OkStatus();
}

}  // namespace kiln::server
