// Positions read from a decoder's own attention mask, for a decoder that counts them from its
// cache's length.
//
// Why: a decoder exported with an attention mask but no position ids (torch.onnx.export of a
// GPT-2 or LLaMA given input_ids, attention_mask and the past) computes its new positions as
// Range(past, past + sequence) over Shape(past_key_values.0.key). Padded to a shape class, the
// cache is longer than the row's, the positions move, the padding proof refuses the model, and
// every step ran at its rows' exact cache length: an engine built and checked per token.
//
// The rewrite: every integer Range whose start is the cache's length (at two probe sizes)
// starts instead at the mask's extent: one past the last cached column a row holds real. Every
// other use of the cache's length (a causal mask's size, say) keeps the padded length, as the
// padded layout needs it. Two forms, the first that proves kept:
//   - each row's own: positions [1, n] made of a Range (torch.arange(...).unsqueeze(0))
//     become extent[row] + Range(0, n), [rows, n], as a position_ids input would be, and the
//     Range's other readers keep the padded layout's positions (a causal mask placed by the
//     same Range, as transformers' cache_position is). Rows of any lengths then share a step,
//     as in a masked export with position ids;
//   - the first row's for all (the Range keeps its length, limit - start): a step's rows must
//     share their cache length (`rows_share_length`, as for a maskless decoder whose length
//     is read from its added mask).
// In the generation loop a row's cache is real from its start to its length and zeros after
// it, so its extent is its length. A Predict pads its cache at the end, so the extent is the
// request's own cache length wherever the row read holds its last cached position, and the
// model computes what the export computes (earlier positions may be hidden: left padding). A
// request where a row read hides it is refused (CheckLastCachedReal): its extent would be
// shorter than its cache.
// Proven as the added mask is (cache_mask_proof.h): the export at each row's own length against
// the rewrite padded, every output's real positions. Nothing changes for a model that pads as
// it is (positions from the mask's cumulative sum, or from position ids), or with
// generation.cache_mask off; a model neither form proves keeps running at exact lengths.
#pragma once

#include "base/status.h"
#include "ir/graph.h"
#include "server/generate/decoder_contract.h"
#include "server/model/cache_mask.h"
#include "server/model/model_config.h"

namespace kiln::server {

// Rewrites `graph` (a decoder with a mask, contract `c`) when it needs and proves the rewrite.
// The outcome names the mask read when it did; says why not in `refused` when a rewrite was
// needed and not proven; is empty otherwise. Errors only for a failure of the rewrite itself.
absl::StatusOr<CacheMaskOutcome> ReadPositionsFromMask(Graph& graph,
                                                       const generate::DecoderContract& c,
                                                       const ModelConfig& config);

// For a model whose positions start at the mask's extent: INVALID_ARGUMENT when the request's
// cache (its first `past` mask columns, `mask` [rows, past + new]) is not empty and a row read
// (every row, or the first alone) hides its last cached position.
absl::Status CheckLastCachedReal(const Tensor& mask, int64_t past, bool every_row);

}  // namespace kiln::server
