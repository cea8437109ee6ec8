#include "server/generate/step.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kiln::server::generate {
namespace {

// Zeroes positions [lengths[b], past) of rows first + b of `t` ([rows, outer, T, inner], T >=
// past).
void ZeroPadding(const CacheTensor& c, const std::vector<int64_t>& lengths, int64_t past, Tensor& t,
                 int64_t first = 0) {
  const int64_t run = c.inner * static_cast<int64_t>(DTypeSize(c.dtype));
  const int64_t T = t.dim(c.axis);
  char* base = static_cast<char*>(t.raw_mutable());
  for (size_t b = 0; b < lengths.size(); ++b) {
    const int64_t len = std::min(lengths[b], past);
    const int64_t row = first + static_cast<int64_t>(b);
    for (int64_t o = 0; o < c.outer; ++o) {
      char* at = base + ((row * c.outer + o) * T + len) * run;
      std::memset(at, 0, static_cast<size_t>((past - len) * run));
    }
  }
}

// `t` when it is a `dtype` tensor of `shape` that only `t` holds, else a new one.
Tensor Reuse(Tensor& t, DType dtype, std::vector<int64_t> shape) {
  if (t.defined() && t.dtype() == dtype && t.shape() == shape && t.owner().use_count() == 1) {
    return std::move(t);
  }
  return Tensor::Uninitialized(dtype, std::move(shape));
}

// The token ids, positions and mask of `total` rows (rows past rows.size() are padding: token
// 0 at position 0, seeing only its new positions).
// With `width` > count the new positions are padded at their end as a shape class pads them
// (token 0 at position 0, mask 0).
absl::Status BuildTokenInputs(const DecoderContract& contract, const std::vector<StepRow>& rows,
                              int64_t total, int64_t count, int64_t width, int64_t past,
                              std::vector<Tensor>& in) {
  Tensor ids = Reuse(in[contract.input_ids], contract.ids_dtype, {total, width});
  const bool positions = contract.has_positions();
  Tensor pos = positions
                   ? Reuse(in[contract.position_ids], contract.positions_dtype, {total, width})
                   : Tensor();
  const bool masked = contract.has_mask();
  Tensor mask = masked
                    ? Reuse(in[contract.attention_mask], contract.mask_dtype, {total, past + width})
                    : Tensor();
  for (int64_t r = 0; r < total; ++r) {
    const bool real = r < static_cast<int64_t>(rows.size());
    const StepRow* row = real ? &rows[static_cast<size_t>(r)] : nullptr;
    // Without a mask nothing hides padding: every row's cache must be exactly `past` long.
    if (row && (row->cached > past || (!masked && row->cached != past) ||
                row->cached + count > static_cast<int64_t>(row->tokens->size()))) {
      return absl::InternalError("a generation step row does not fit its padded past");
    }
    const int64_t cached = row ? row->cached : 0;
    for (int64_t k = 0; k < width; ++k) {
      const bool fed = row && k < count;
      ids.SetInt(r * width + k, fed ? (*row->tokens)[static_cast<size_t>(cached + k)] : 0);
      if (positions) pos.SetInt(r * width + k, fed ? cached + k : 0);
    }
    // 1 over the row's cache and its new positions, 0 over the padding between and after.
    for (int64_t k = 0; masked && k < past + width; ++k) {
      mask.SetInt(r * (past + width) + k, k < cached || (k >= past && k < past + count) ? 1 : 0);
    }
  }
  in[contract.input_ids] = std::move(ids);
  if (positions) in[contract.position_ids] = std::move(pos);
  if (masked) in[contract.attention_mask] = std::move(mask);
  return absl::OkStatus();
}

std::vector<int64_t> CacheShape(const ModelSignature& sig, const CacheTensor& c, int64_t rows,
                                int64_t length) {
  std::vector<int64_t> shape = sig.inputs[c.input].shape;
  shape[0] = rows;
  shape[static_cast<size_t>(c.axis)] = length;
  return shape;
}

}  // namespace

absl::Status BuildStepInputs(const DecoderContract& contract, const ModelSignature& sig,
                             const KvCache& cache, const std::vector<StepRow>& rows, int64_t count,
                             int64_t past, std::vector<Tensor>& in, int64_t width) {
  const int64_t n = static_cast<int64_t>(rows.size());
  in.resize(sig.inputs.size());
  RETURN_IF_ERROR(BuildTokenInputs(contract, rows, n, count, std::max(width, count), past, in));
  std::vector<const PageTable*> tables;
  std::vector<int64_t> lengths;
  for (const StepRow& row : rows) {
    tables.push_back(row.table);
    lengths.push_back(row.cached);
  }
  for (size_t j = 0; j < contract.cache.size(); ++j) {
    const CacheTensor& c = contract.cache[j];
    // Each row's positions past its length are zeroed, the rest gathered: the mask hides
    // the padding, but a value there still meets a zero weight, so it must be finite.
    Tensor t = Reuse(in[c.input], c.dtype, CacheShape(sig, c, n, past));
    ZeroPadding(c, lengths, past, t);
    cache.Gather(j, tables, lengths, t);
    in[c.input] = std::move(t);
  }
  return absl::OkStatus();
}

absl::Status BuildAppendingStep(const DecoderContract& contract, const ModelSignature& sig,
                                const KvCache& cache, const std::vector<StepRow>& rows,
                                int64_t total_rows, int64_t count, int64_t logit_positions,
                                int64_t past, std::vector<Tensor>& in, std::vector<Tensor>& out,
                                HeldRows& held, SpareMemory* spare, int64_t width) {
  width = std::max(width, count);
  if (sig.outputs.size() != contract.cache.size() + 1) {
    return absl::FailedPreconditionError(
        "an appending step needs a model whose outputs are the logits and the presents only");
  }
  if (!contract.has_mask()) {
    // The presents it keeps hold each row's cache padded to the step's past.
    return absl::FailedPreconditionError("an appending step needs an attention mask");
  }
  in.resize(sig.inputs.size());
  out.resize(sig.outputs.size());
  RETURN_IF_ERROR(BuildTokenInputs(contract, rows, total_rows, count, width, past, in));
  auto zeros = [&](DType dtype, std::vector<int64_t> shape) {
    return spare ? spare->Zeros(dtype, std::move(shape)) : Tensor(dtype, std::move(shape));
  };
  // Never read: one zero tensor per shape stands for every past input of that shape.
  std::vector<Tensor> unread;
  bool fresh = false;  // a present made anew holds no row
  // Presents made anew here: zero throughout, so their padding needs no zeroing (nor the
  // page faults writing it would cost on a fresh mapping).
  std::vector<bool> zero(contract.cache.size(), false);
  for (size_t j = 0; j < contract.cache.size(); ++j) {
    const CacheTensor& c = contract.cache[j];
    Tensor& past_in = in[c.input];
    const std::vector<int64_t> past_shape = CacheShape(sig, c, total_rows, past);
    for (const Tensor& u : unread) {
      if (!past_in.defined() && u.dtype() == c.dtype && u.shape() == past_shape) past_in = u;
    }
    if (!past_in.defined() || past_in.dtype() != c.dtype || past_in.shape() != past_shape) {
      past_in = zeros(c.dtype, past_shape);
    }
    unread.push_back(past_in);
    Tensor& present = out[c.output];
    const std::vector<int64_t> shape = CacheShape(sig, c, total_rows, past + width);
    if (!present.defined() || present.dtype() != c.dtype || present.shape() != shape ||
        present.owner().use_count() != 1) {
      present = zeros(c.dtype, shape);  // finite everywhere
      fresh = true;
      zero[j] = true;
    }
  }
  Tensor& logits = out[contract.logits];
  const std::vector<int64_t> logits_shape{total_rows, logit_positions, contract.vocab};
  if (!logits.defined() || logits.shape() != logits_shape || logits.dtype() != DType::kFloat32) {
    logits = zeros(DType::kFloat32, logits_shape);
  }
  if (fresh || held.id.size() != static_cast<size_t>(total_rows)) {
    held.id.assign(static_cast<size_t>(total_rows), 0);
    held.positions.assign(static_cast<size_t>(total_rows), 0);
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    const StepRow& row = rows[r];
    const bool same = held.id[r] == row.id && held.positions[r] <= row.cached;
    const int64_t from = same ? held.positions[r] : 0;
    for (size_t j = 0; j < contract.cache.size(); ++j) {
      Tensor& present = out[contract.cache[j].output];
      if (!same && !zero[j]) {
        ZeroPadding(contract.cache[j], {row.cached}, past, present, static_cast<int64_t>(r));
      }
      cache.GatherRange(j, *row.table, from, row.cached, present, static_cast<int64_t>(r));
    }
    held.id[r] = row.id;
    held.positions[r] = row.cached;
  }
  for (size_t r = rows.size(); r < held.id.size(); ++r) held.id[r] = 0;
  return absl::OkStatus();
}

absl::Status StoreStep(const DecoderContract& contract, KvCache& cache,
                       const std::vector<StepRow>& rows, int64_t count, int64_t past,
                       const std::vector<Tensor>& outputs, int64_t width) {
  width = std::max(width, count);
  for (size_t j = 0; j < contract.cache.size(); ++j) {
    const CacheTensor& c = contract.cache[j];
    if (c.output >= outputs.size()) return absl::InternalError("a present output is missing");
    const Tensor& present = outputs[c.output];
    if (present.dtype() != c.dtype || present.rank() <= c.axis ||
        present.dim(0) < static_cast<int64_t>(rows.size()) ||  // padding rows after
        present.dim(c.axis) != past + width ||
        present.numel() != present.dim(0) * c.outer * c.inner * (past + width)) {
      return absl::InternalError(absl::StrCat("output '", c.present_name, "' is ",
                                              ShapeToString(present.shape()), ", not the past (",
                                              past, ") plus ", width, " new positions"));
    }
    for (size_t r = 0; r < rows.size(); ++r) {
      cache.Scatter(j, present, static_cast<int64_t>(r), past, count, *rows[r].table,
                    rows[r].cached);
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::server::generate
