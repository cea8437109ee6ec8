// An attention mask for a decoder exported without one, so its steps pad like any decoder's.
//
// Why: a decoder with past and no attention mask (a plain torch.onnx.export of a model with
// past writes one) attends to every cached position, so a cache padded to a shape class would
// be seen, and such a model ran each step at its rows' exact cache length: an engine built and
// checked per new length, ~30 ms a token where a masked decoder takes ~1 ms (docs/generation.md,
// Exact lengths). With a mask input added, the loop pads its steps to classes and hides the
// padding, and the model builds nothing after load.
//
// The rewrite, on a clone of the imported graph:
//   - a new input (generation.tensors.attention_mask, "attention_mask" by default), int64
//     [batch, "past + sequence"], the common exporters' form: 1 where a key is real;
//   - before every Softmax whose reduced axis is the keys' (its size is past + sequence at two
//     probe sizes) and whose dim 0 is the batch: Add((1 - mask) * lowest), broadcast over the
//     heads and queries, so a padded key weighs exactly 0;
//   - when the model counts its positions from the cache's length (Shape of a past input),
//     that length is read from the mask instead (the ones over the past of the batch's first
//     row), and the steps' rows must then share their cache length (`rows_share_length`).
// Each form is proven before it is kept: the reference interpreter runs the original model on
// two rows at their own lengths and the rewritten one on both rows padded together, and the
// logits and presents of the real positions must match within the warm-up tolerance. The
// mask-only form is tried first (rows of any lengths), then with the length read from the
// mask; a model neither proves keeps running at exact lengths, as before.
//
// A client calling Predict on such a model may leave the added input out: the server feeds
// ones (every key real), which is what the exported model computes (request_validation.h).
#pragma once

#include <string>

#include "base/status.h"
#include "ir/graph.h"
#include "server/model/model_config.h"

namespace kiln::server {

struct CacheMaskOutcome {
  std::string input;  // the added input's name; empty when none was added
  // The mask the positions are read from (the added one, or the model's own for
  // `positions_from_mask`), when `per_row` or `rows_share_length`.
  std::string mask;
  // A decoder with a mask of its own whose positions now start at the mask's extent
  // (mask_positions.h); else the length is the count of the added mask's real positions.
  bool positions_from_mask = false;
  bool per_row = false;            // each row's positions read from its own mask row
  bool rows_share_length = false;  // every row's positions read from the first row's
  std::string past_symbol;         // the cache's length dim, when changed
  std::string refused;             // why the steps keep exact lengths, when a rewrite was needed
  bool added() const { return !input.empty(); }
  // Whether the load log and GetModel have something to say.
  bool reported() const { return added() || positions_from_mask || !refused.empty(); }
  // The load log's line: "input 'attention_mask' added: ..." or why not.
  std::string ToString() const;
};

// Adds the mask to `graph` (replacing it with the proven rewrite) when generation is not off,
// generation.cache_mask is auto, and the graph is a decoder with past without a mask input;
// for a decoder with a mask, reads its positions from it where it counts them from the
// cache's length (mask_positions.h). Anything else leaves `graph` alone and returns an
// outcome with nothing changed (`refused` says why where a rewrite was needed). Errors only
// for a failure of a rewrite itself.
absl::StatusOr<CacheMaskOutcome> AddCacheMask(Graph& graph, const ModelConfig& config);

// INVALID_ARGUMENT unless a request's `mask` is [rows, past + new positions] (the shape both
// checks below read).
absl::Status CheckMaskSpansPast(const Tensor& mask, int64_t past);

// For a model whose rows share their cache length (`rows_share_length`): INVALID_ARGUMENT
// when the rows of a request's `mask` ([rows, past + new]) do not count the same real
// positions over its first `past` columns (the model would read every row's positions from
// the first's).
absl::Status CheckRowsShareLength(const Tensor& mask, int64_t past);

// What AddCacheMask depends on besides the model file, for the engine cache key.
std::string CacheMaskKey(const ModelConfig& config);

}  // namespace kiln::server
