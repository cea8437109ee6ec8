#include "server/generate/step.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kiln::server::generate {
namespace {

// Zeroes positions [lengths[b], past) of every row of `t` ([rows, outer, past, inner]).
void ZeroPadding(const CacheTensor& c, const std::vector<int64_t>& lengths, int64_t past,
                 Tensor& t) {
  const int64_t run = c.inner * static_cast<int64_t>(DTypeSize(c.dtype));
  char* base = static_cast<char*>(t.raw_mutable());
  for (size_t b = 0; b < lengths.size(); ++b) {
    const int64_t len = std::min(lengths[b], past);
    for (int64_t o = 0; o < c.outer; ++o) {
      char* row = base + ((static_cast<int64_t>(b) * c.outer + o) * past + len) * run;
      std::memset(row, 0, static_cast<size_t>((past - len) * run));
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

}  // namespace

absl::Status BuildStepInputs(const DecoderContract& contract, const ModelSignature& sig,
                             const KvCache& cache, const std::vector<StepRow>& rows, int64_t count,
                             int64_t past, std::vector<Tensor>& in) {
  const int64_t n = static_cast<int64_t>(rows.size());
  in.resize(sig.inputs.size());
  Tensor ids = Reuse(in[contract.input_ids], contract.ids_dtype, {n, count});
  Tensor pos = Reuse(in[contract.position_ids], contract.positions_dtype, {n, count});
  Tensor mask = Reuse(in[contract.attention_mask], contract.mask_dtype, {n, past + count});
  std::vector<const PageTable*> tables;
  std::vector<int64_t> lengths;
  for (int64_t r = 0; r < n; ++r) {
    const StepRow& row = rows[static_cast<size_t>(r)];
    if (row.cached > past || row.cached + count > static_cast<int64_t>(row.tokens->size())) {
      return absl::InternalError("a generation step row does not fit its padded past");
    }
    for (int64_t k = 0; k < count; ++k) {
      ids.SetInt(r * count + k, (*row.tokens)[static_cast<size_t>(row.cached + k)]);
      pos.SetInt(r * count + k, row.cached + k);
    }
    // 1 over the row's cache and its new positions, 0 over the padding between.
    for (int64_t k = 0; k < past + count; ++k) {
      mask.SetInt(r * (past + count) + k, k < row.cached || k >= past ? 1 : 0);
    }
    tables.push_back(row.table);
    lengths.push_back(row.cached);
  }
  in[contract.input_ids] = std::move(ids);
  in[contract.position_ids] = std::move(pos);
  in[contract.attention_mask] = std::move(mask);
  for (size_t j = 0; j < contract.cache.size(); ++j) {
    const CacheTensor& c = contract.cache[j];
    std::vector<int64_t> shape = sig.inputs[c.input].shape;
    shape[0] = n;
    shape[static_cast<size_t>(c.axis)] = past;
    // Each row's positions past its length are zeroed, the rest gathered: the mask hides
    // the padding, but a value there still meets a zero weight, so it must be finite.
    Tensor t = Reuse(in[c.input], c.dtype, std::move(shape));
    ZeroPadding(c, lengths, past, t);
    cache.Gather(j, tables, lengths, t);
    in[c.input] = std::move(t);
  }
  return absl::OkStatus();
}

absl::Status StoreStep(const DecoderContract& contract, KvCache& cache,
                       const std::vector<StepRow>& rows, int64_t count, int64_t past,
                       const std::vector<Tensor>& outputs) {
  for (size_t j = 0; j < contract.cache.size(); ++j) {
    const CacheTensor& c = contract.cache[j];
    if (c.output >= outputs.size()) return absl::InternalError("a present output is missing");
    const Tensor& present = outputs[c.output];
    if (present.dtype() != c.dtype || present.rank() <= c.axis ||
        present.dim(0) != static_cast<int64_t>(rows.size()) ||
        present.dim(c.axis) != past + count ||
        present.numel() != present.dim(0) * c.outer * c.inner * (past + count)) {
      return absl::InternalError(absl::StrCat("output '", c.present_name, "' is ",
                                              ShapeToString(present.shape()), ", not the past (",
                                              past, ") plus ", count, " new positions"));
    }
    for (size_t r = 0; r < rows.size(); ++r) {
      cache.Scatter(j, present, static_cast<int64_t>(r), past, count, *rows[r].table,
                    rows[r].cached);
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::server::generate
