#include "server/model/cache_mask_proof.h"

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/passes/fold_cache.h"
#include "compiler/shape/infer.h"
#include "ops/interpreter.h"
#include "runtime/check/differential.h"
#include "server/model/decoder_dims.h"
#include "server/model/padding.h"
#include "server/model/warmup_check.h"

namespace kiln::server {
namespace {

using generate::DecoderContract;

constexpr int64_t kSeq = 2;      // new positions of a row
constexpr int64_t kPadPast = 8;  // the padded step's cache length
constexpr int64_t kPadSeq = 3;   // and new positions

struct Row {
  int64_t past = 0;
  ref::TensorMap feed, want;
};

DimValues Sizes(const DecoderContract& c, int64_t past, int64_t seq) {
  return {{c.past_symbol, past}, {c.sequence_symbol, seq}};
}

// The exported decoder at batch 1 on a seeded feed, and what it computes. `constants`: the
// results of nodes over the model's weights (a tied embedding's Transpose), shared by the
// proof's runs, whose clones share the weights' buffers.
absl::StatusOr<Row> OriginalRow(const Graph& original, const DecoderContract& c, int64_t past,
                                uint64_t seed, const ModelConfig& config,
                                ref::ConstantResults& constants) {
  std::unique_ptr<Graph> g = original.Clone();
  RETURN_IF_ERROR(shape::Specialize(*g, 1, Sizes(c, past, kSeq)));
  check::InputRanges ranges = RangesOf(config.warmup, *g);
  ranges.seed = seed;
  Row row;
  row.past = past;
  ASSIGN_OR_RETURN(row.feed, check::RandomInputs(*g, ranges));
  if (c.has_mask()) {  // the model's own mask: every position real, as a row of the loop
    const Value* m = g->inputs[c.attention_mask];
    Tensor ones(m->dtype, {1, past + kSeq});
    for (int64_t i = 0; i < ones.numel(); ++i) ones.SetDouble(i, 1.0);
    row.feed[m->name] = std::move(ones);
  }
  ASSIGN_OR_RETURN(row.want, ref::Run(*g, row.feed, &constants));
  return row;
}

// The first node output whose shape is known only at run time, "" when none: such a value
// makes the engine's memory plan and in-place cache append give way to dynamic regions.
std::string FirstDynamic(const Graph& g) {
  for (const auto& n : g.nodes()) {
    for (const Value* v : n->outputs) {
      if (v && (!v->shape || !IsStatic(*v->shape))) return absl::StrCat(n->Describe(), "'s output");
    }
  }
  return "";
}

// Tensors of one row each (dim 0 of 1), stacked along dim 0.
Tensor Stack(const std::vector<Tensor>& rows) {
  std::vector<int64_t> shape = rows[0].shape();
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor out(rows[0].dtype(), shape);
  size_t at = 0;
  for (const Tensor& t : rows) {
    std::memcpy(static_cast<char*>(out.raw_mutable()) + at, t.raw(), t.nbytes());
    at += t.nbytes();
  }
  return out;
}

Tensor RowOf(const Tensor& t, int64_t b) {
  std::vector<int64_t> shape = t.shape();
  const size_t bytes = t.nbytes() / static_cast<size_t>(shape[0]);
  shape[0] = 1;
  Tensor out(t.dtype(), shape);
  std::memcpy(out.raw_mutable(), static_cast<const char*>(t.raw()) + bytes * b, bytes);
  return out;
}

// Row `row`'s inputs of `masked`, in its input order, padded to the padded step's sizes.
absl::StatusOr<std::vector<Tensor>> PaddedInputs(const Graph& masked, const DecoderContract& c,
                                                 const Row& row) {
  DimSymbols symbols = DeclaredSignature(masked).dim_symbols;
  std::vector<Tensor> in;
  for (size_t k = 0; k < masked.inputs.size(); ++k) {
    if (!symbols[k].empty()) symbols[k][0].clear();  // the batch: rows are stacked after
    auto it = row.feed.find(masked.inputs[k]->name);
    if (it != row.feed.end()) {
      in.push_back(it->second);
      continue;
    }
    Tensor ones(DType::kInt64, {1, row.past + kSeq});  // the added mask: every position real
    for (int64_t i = 0; i < ones.numel(); ++i) ones.SetInt(i, 1);
    in.push_back(ones);
  }
  return ResizeToDims(std::move(in), symbols, Sizes(c, row.past, kSeq),
                      Sizes(c, kPadPast, kPadSeq));
}

// Per dim of an output: the symbol (or sum) its size follows, from the sizes it has unpadded
// (`want`) and padded (`got`).
absl::StatusOr<std::vector<std::string>> OutputLabels(const std::string& name, const Tensor& want,
                                                      const Tensor& got, const DecoderContract& c,
                                                      int64_t past) {
  if (want.rank() != got.rank()) {
    return absl::FailedPreconditionError(absl::StrCat("output '", name, "' changes its rank"));
  }
  std::vector<std::string> labels(static_cast<size_t>(want.rank()));
  for (int64_t i = 1; i < want.rank(); ++i) {
    const int64_t a = want.dim(i), b = got.dim(i);
    std::string& l = labels[static_cast<size_t>(i)];
    if (a == past + kSeq && b == kPadPast + kPadSeq) {
      l = c.past_symbol + " + " + c.sequence_symbol;
    } else if (a == kSeq && b == kPadSeq) {
      l = c.sequence_symbol;
    } else if (a == past && b == kPadPast) {
      l = c.past_symbol;
    } else if (a != b) {
      return absl::FailedPreconditionError(absl::StrCat("output '", name, "' dim ", i, " is ", a,
                                                        " and ", b, " padded: not a cache dim"));
    }
  }
  return labels;
}

// Row `b` of the padded run's outputs cut back to the row's own sizes.
absl::StatusOr<ref::TensorMap> RowOutputs(const Graph& masked, const ref::TensorMap& padded,
                                          const DecoderContract& c, const Row& row, int64_t b) {
  ref::TensorMap got;
  for (const Value* o : masked.outputs) {
    auto w = row.want.find(o->name);
    if (w == row.want.end()) {
      return absl::InternalError(absl::StrCat("output '", o->name, "' is not the model's"));
    }
    Tensor t = RowOf(padded.at(o->name), b);
    ASSIGN_OR_RETURN(std::vector<std::string> labels,
                     OutputLabels(o->name, w->second, t, c, row.past));
    ASSIGN_OR_RETURN(std::vector<Tensor> cut,
                     ResizeToDims({std::move(t)}, {labels}, Sizes(c, kPadPast, kPadSeq),
                                  Sizes(c, row.past, kSeq)));
    got[o->name] = std::move(cut[0]);
  }
  return got;
}

}  // namespace

struct CacheMaskProver::State {
  const Graph& original;
  DecoderContract contract;
  ModelConfig config;
  passes::FoldCache constants;
  std::map<std::pair<size_t, int64_t>, Row> rows;  // by (position in the batch, cache length)
};

CacheMaskProver::CacheMaskProver(const Graph& original, const DecoderContract& c,
                                 const ModelConfig& config)
    : state_(new State{original, c, config, {}, {}}) {}

CacheMaskProver::~CacheMaskProver() = default;

absl::Status CacheMaskProver::Prove(const Graph& masked, bool rows_share_length) {
  const Graph& original = state_->original;
  const DecoderContract& c = state_->contract;
  const ModelConfig& config = state_->config;
  const std::vector<int64_t> pasts =
      rows_share_length ? std::vector<int64_t>{3, 3} : std::vector<int64_t>{1, 5};
  passes::FoldCache& constants = state_->constants;
  std::vector<const Row*> rows;
  for (size_t b = 0; b < pasts.size(); ++b) {
    auto it = state_->rows.find({b, pasts[b]});
    if (it == state_->rows.end()) {
      ASSIGN_OR_RETURN(
          Row row, OriginalRow(original, c, pasts[b], config.warmup.seed + b, config, constants));
      it = state_->rows.emplace(std::make_pair(b, pasts[b]), std::move(row)).first;
    }
    rows.push_back(&it->second);
  }
  std::vector<std::vector<Tensor>> per_input(masked.inputs.size());
  for (const Row* row : rows) {
    ASSIGN_OR_RETURN(std::vector<Tensor> in, PaddedInputs(masked, c, *row));
    for (size_t k = 0; k < in.size(); ++k) per_input[k].push_back(std::move(in[k]));
  }
  std::unique_ptr<Graph> g = masked.Clone();
  RETURN_IF_ERROR(
      shape::Specialize(*g, static_cast<int64_t>(rows.size()), Sizes(c, kPadPast, kPadSeq)));
  if (const std::string dynamic = FirstDynamic(*g); !dynamic.empty()) {
    std::unique_ptr<Graph> export_at = original.Clone();
    RETURN_IF_ERROR(shape::Specialize(*export_at, 1, Sizes(c, kPadPast, kPadSeq)));
    if (FirstDynamic(*export_at).empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(dynamic,
                       " has a size known only at run time once the length is read "
                       "from the mask"));
    }
  }
  ref::TensorMap feed;
  for (size_t k = 0; k < g->inputs.size(); ++k) feed[g->inputs[k]->name] = Stack(per_input[k]);
  ASSIGN_OR_RETURN(const ref::TensorMap padded, ref::Run(*g, feed, &constants));
  for (size_t b = 0; b < rows.size(); ++b) {
    const Row& row = *rows[b];
    ASSIGN_OR_RETURN(const ref::TensorMap got,
                     RowOutputs(masked, padded, c, row, static_cast<int64_t>(b)));
    const check::Tolerance tol = ToleranceFor(
        original, row.want, check::Tolerance{config.warmup.rtol, config.warmup.atol, {}});
    const check::Divergence d = check::CompareOutputs(row.want, got, tol);
    if (!d.ok) {
      return absl::FailedPreconditionError(
          absl::StrCat("padded, a row with ", row.past, " cached positions moves: ", d.message));
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::server
