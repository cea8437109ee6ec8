#include "server/model/cache_mask.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/shape/infer.h"
#include "server/generate/decoder_contract.h"
#include "server/model/cache_mask_graph.h"
#include "server/model/cache_mask_proof.h"
#include "server/model/decoder_dims.h"
#include "server/model/mask_positions.h"

namespace kiln::server {
namespace {

using generate::DecoderContract;
using mask_graph::Ints;
using mask_graph::kProbes;
using mask_graph::Op;
using mask_graph::Probe;

// The inputs of the Softmaxes over the keys: reduced axis last, of size past + sequence, and
// dim 0 the batch, at every probe; by name (which a clone keeps), with their rank.
// FAILED_PRECONDITION for one that does not compute in float32.
absl::StatusOr<std::map<std::string, size_t>> KeySoftmaxInputs(mask_graph::Probed& probed) {
  ASSIGN_OR_RETURN(const std::vector<std::unique_ptr<Graph>>* at, probed.Graphs());
  std::map<std::string, size_t> found;
  for (size_t i = 0; i < at->size(); ++i) {
    const Probe& p = kProbes[i];
    std::map<std::string, size_t> here;
    for (const auto& n : (*at)[i]->nodes()) {
      const Value* x = n->input(0);
      if (n->op_type != "Softmax" || !n->domain.empty() || !x || !x->shape) continue;
      const auto r = static_cast<int64_t>(x->shape->size());
      const int64_t axis = n->GetInt("axis", -1);
      if (r < 2 || (axis != -1 && axis != r - 1)) continue;
      if ((*x->shape)[r - 1].value != p.past + p.seq || (*x->shape)[0].value != p.batch) continue;
      if (x->dtype != DType::kFloat32) {
        return absl::FailedPreconditionError(
            absl::StrCat(n->Describe(), " computes in ", DTypeName(x->dtype), ", not float32"));
      }
      if (i == 0 || found.count(x->name)) here.emplace(x->name, static_cast<size_t>(r));
    }
    found = std::move(here);
  }
  return found;
}

// (1 - mask) * lowest before every Softmax over the keys, as [batch, 1, ..., 1, keys].
void MaskSoftmaxes(Graph& g, Value* mask_f, const std::map<std::string, size_t>& inputs) {
  Value* one = g.AddConstant("kiln_mask_one", Tensor::Scalar(DType::kFloat32, 1.0));
  Value* lowest = g.AddConstant(
      "kiln_mask_lowest", Tensor::Scalar(DType::kFloat32, std::numeric_limits<float>::lowest()));
  Value* bias = Op(g, "Mul", {Op(g, "Sub", {one, mask_f}), lowest});
  std::map<size_t, Value*> by_rank;
  for (Node* n : mask_graph::NodesReading(g, "Softmax", inputs)) {
    Value* x = n->input(0);
    const size_t r = inputs.at(x->name);
    Value*& b = by_rank[r];
    if (!b) {
      std::vector<int64_t> axes;
      for (size_t a = 1; a + 1 < r; ++a) axes.push_back(static_cast<int64_t>(a));
      b = axes.empty() ? bias : Op(g, "Unsqueeze", {bias, Ints(g, axes)});
    }
    n->inputs[0] = Op(g, "Add", {x, b});
  }
}

// The graph's Shapes of a past input, with that input's past axis.
std::vector<std::pair<Node*, int64_t>> CacheShapes(const Graph& g, const DecoderContract& c) {
  std::map<const Value*, int64_t> axis_of;
  for (const auto& t : c.cache) axis_of[g.inputs[t.input]] = t.axis;
  std::vector<std::pair<Node*, int64_t>> shapes;
  for (const auto& n : g.nodes()) {
    const Value* x = n->input(0);
    if (n->op_type == "Shape" && n->domain.empty() && x && axis_of.count(x) && x->shape) {
      shapes.emplace_back(n.get(), axis_of.at(x));
    }
  }
  return shapes;
}

// int64 [rows, 1] (`keepdims`) or [1]: how many of `columns` ([rows, n] of 0.0 / 1.0) are real.
Value* RealCount(Graph& g, Value* columns, bool keepdims) {
  Value* sum =
      Op(g, "ReduceSum", {columns, Ints(g, {1})}, {{"keepdims", Attribute::Int(keepdims ? 1 : 0)}});
  return mask_graph::CastTo(g, sum, DType::kInt64);
}

// Every Shape of a past input reads the cache's length from the mask: the ones over the
// past of the batch's first row (its real length; the rows of a step share it).
void LengthFromMask(Graph& g, Value* mask_f, const DecoderContract& c) {
  const std::vector<std::pair<Node*, int64_t>> shapes = CacheShapes(g, c);
  if (shapes.empty()) return;
  Value* length = RealCount(
      g, mask_graph::PastColumns(g, mask_f, mask_graph::CacheLength(g, c), /*first_row=*/true),
      /*keepdims=*/false);  // [1]
  for (const auto& [n, axis] : shapes) {
    Value* past = n->input(0);
    const auto rank = static_cast<int64_t>(past->shape->size());
    Value* full = Op(g, "Shape", {past});
    Value* zero = Ints(g, {0});
    Value* shape = Op(g, "Concat",
                      {Op(g, "Slice", {full, zero, Ints(g, {axis}), zero}), length,
                       Op(g, "Slice", {full, Ints(g, {axis + 1}), Ints(g, {rank}), zero})},
                      {{"axis", Attribute::Int(0)}});
    if (n->HasAttr("start") || n->HasAttr("end")) {  // Shape-15's window, as a Slice
      shape = Op(g, "Slice",
                 {shape, Ints(g, {n->GetInt("start", 0)}),
                  Ints(g, {n->GetInt("end", std::numeric_limits<int64_t>::max())}), zero});
    }
    g.ReplaceAllUses(n->output(0), shape);
  }
}

// Where the added mask's positions come from: none read (the model's own stay), each row's
// count of real cached positions (positions [1, n] made [rows, n], other readers of the Range
// left alone), or the first row's count for every row (each Shape of a past input).
enum class Form { kMaskOnly, kRowCounts, kFirstRowCount };

// The graph with the mask input before the Softmaxes whose inputs are `softmaxes`, and its
// positions read per `form` (`starts`: the Ranges over the cache's length, for kRowCounts;
// FAILED_PRECONDITION where none is made positions [1, n]).
absl::StatusOr<std::unique_ptr<Graph>> Rewrite(const Graph& graph, const DecoderContract& c,
                                               const std::string& name,
                                               const std::map<std::string, size_t>& softmaxes,
                                               const std::map<std::string, DType>& starts,
                                               Form form) {
  std::unique_ptr<Graph> g = graph.Clone();
  Value* mask = g->AddValue(name);
  mask->dtype = DType::kInt64;
  const Value* ids = g->inputs[c.input_ids];
  mask->shape = Shape{(*ids->shape)[0], Dim::Symbol(c.past_symbol + " + " + c.sequence_symbol)};
  g->inputs.push_back(mask);
  Value* mask_f = mask_graph::Real(*g, mask);
  MaskSoftmaxes(*g, mask_f, softmaxes);
  if (form == Form::kRowCounts) {
    Value* real =
        mask_graph::PastColumns(*g, mask_f, mask_graph::CacheLength(*g, c), /*first_row=*/false);
    Value* counts = RealCount(*g, real, /*keepdims=*/true);  // [rows, 1]
    if (!mask_graph::PerRowPositions(*g, counts, starts)) {
      return absl::FailedPreconditionError(
          "no Range over the cache's length is made positions [1, n]");
    }
  } else if (form == Form::kFirstRowCount) {
    LengthFromMask(*g, mask_f, c);
  }
  if (!g->TopologicalSort()) return absl::InternalError("the masked decoder has a cycle");
  return g;
}

}  // namespace

std::string CacheMaskOutcome::ToString() const {
  const char* rows = rows_share_length ? ", rows of one cache length per step"
                     : per_row         ? ", each row's positions from its own mask row"
                                       : "";
  if (positions_from_mask) {
    return absl::StrCat("positions read from '", mask,
                        "' (the model counts them from its cache's length; the padded form is "
                        "proven against it): steps pad to shape classes",
                        rows);
  }
  if (!added()) return absl::StrCat("steps run at exact cache lengths: ", refused);
  return absl::StrCat("input '", input,
                      "' added (the exported decoder has no attention mask; the padded form is "
                      "proven against it): steps pad to shape classes",
                      rows, rows_share_length ? " (positions count from its length)" : "");
}

absl::StatusOr<CacheMaskOutcome> AddCacheMask(Graph& graph, const ModelConfig& config) {
  CacheMaskOutcome out;
  const generate::GenerationConfig& gc = config.generation;
  if (gc.mode == "off") return out;
  absl::StatusOr<DecoderContract> c =
      generate::FindDecoderContract(DeclaredSignature(graph), gc.tensors);
  if (!c.ok()) return out;
  if (c->has_mask()) return ReadPositionsFromMask(graph, *c, config);
  const std::string& name = gc.tensors.attention_mask;
  if (gc.cache_mask == "off") {
    out.refused = "generation.cache_mask is off";
  } else if (graph.FindValue(name) != nullptr) {
    out.refused = absl::StrCat("the graph has a value named '", name, "' already");
  } else if (!graph.inputs[c->input_ids]->shape || graph.inputs[c->input_ids]->shape->empty()) {
    out.refused = absl::StrCat("input '", graph.inputs[c->input_ids]->name, "' has no shape");
  }
  if (!out.refused.empty()) return out;
  mask_graph::Probed probed(graph, *c);
  absl::StatusOr<std::map<std::string, size_t>> softmaxes = KeySoftmaxInputs(probed);
  if (softmaxes.ok() && softmaxes->empty()) {
    softmaxes = absl::FailedPreconditionError(
        "no Softmax over the cache's positions with the batch as its first dim");
  }
  std::string why = softmaxes.ok() ? "" : std::string(softmaxes.status().message());
  // The mask alone first (rows of any lengths share a step), then, where the model reads the
  // cache's length, each row's positions read from it, then the first row's for every row.
  const bool reads_length = !CacheShapes(graph, *c).empty();
  std::map<std::string, DType> starts;
  if (softmaxes.ok() && reads_length) {
    ASSIGN_OR_RETURN(starts, mask_graph::LengthStarts(graph, probed));
  }
  CacheMaskProver prover(graph, *c, config);
  for (Form form : {Form::kMaskOnly, Form::kRowCounts, Form::kFirstRowCount}) {
    if (!softmaxes.ok() || (form != Form::kMaskOnly && !reads_length)) break;
    if (form == Form::kRowCounts && starts.empty()) continue;
    const bool first_row = form == Form::kFirstRowCount;
    absl::StatusOr<std::unique_ptr<Graph>> g = Rewrite(graph, *c, name, *softmaxes, starts, form);
    absl::Status proof = g.ok() ? prover.Prove(**g, first_row) : g.status();
    if (proof.ok()) {
      graph = std::move(**g);
      out.input = name;
      out.mask = name;
      out.per_row = form == Form::kRowCounts;
      out.rows_share_length = first_row;
      out.past_symbol = c->past_symbol;
      return out;
    }
    why = std::string(proof.message());
  }
  out.refused = absl::StrCat("an added attention mask does not reproduce the model (", why, ")");
  return out;
}

absl::Status CheckMaskSpansPast(const Tensor& mask, int64_t past) {
  if (mask.rank() != 2 || past > mask.dim(1)) {
    return absl::InvalidArgumentError("the attention mask is not [rows, past + new positions]");
  }
  return absl::OkStatus();
}

absl::Status CheckRowsShareLength(const Tensor& mask, int64_t past) {
  RETURN_IF_ERROR(CheckMaskSpansPast(mask, past));
  int64_t first = 0;
  for (int64_t r = 0; r < mask.dim(0); ++r) {
    int64_t real = 0;
    for (int64_t i = 0; i < past; ++i) real += mask.GetInt(r * mask.dim(1) + i) != 0 ? 1 : 0;
    if (r == 0) first = real;
    if (real != first) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attention_mask row ", r, " has ", real, " cached positions and row 0 has ", first,
          ": this model (exported without a mask) reads its positions from the first row's, so "
          "the rows of one request must share their cache length"));
    }
  }
  return absl::OkStatus();
}

std::string CacheMaskKey(const ModelConfig& config) {
  const generate::GenerationConfig& gc = config.generation;
  if (gc.mode == "off") return "mask:off";
  // The roles' names decide whether and what is added; the proof's feed and tolerance
  // whether a form is kept.
  const generate::DecoderTensorNames& t = gc.tensors;
  // "positions:rows": positions are read from the mask, each row's where they can be
  // (mask_positions.h), which changes the graphs an older key named.
  std::string key = absl::StrCat("mask:", gc.cache_mask, ",positions:rows", ",", t.input_ids, ",",
                                 t.attention_mask, ",", t.position_ids, ",", t.logits);
  for (const auto& [past, present] : t.cache) absl::StrAppend(&key, ",", past, ">", present);
  const WarmupConfig& w = config.warmup;
  absl::StrAppend(&key, ",proof:", w.seed, ",", w.rtol, ",", w.atol, ",", w.int_lo, ",", w.int_hi,
                  ",", w.float_lo, ",", w.float_hi);
  for (const auto& [name, range] : w.input_ranges) {
    absl::StrAppend(&key, ",", name, ":", range.first, ":", range.second);
  }
  return key;
}

}  // namespace kiln::server
