// The proof that a decoder with an added attention mask (cache_mask.h), or with positions read
// from its own (mask_positions.h), computes, with its steps padded the way the generation loop
// pads them, what the exported decoder computes at each row's own cache length.
#pragma once

#include <memory>

#include "base/status.h"
#include "ir/graph.h"
#include "server/generate/decoder_contract.h"
#include "server/model/model_config.h"

namespace kiln::server {

// The reference interpreter runs `original` on two rows, each at batch 1 with its own cache
// length (different ones unless `rows_share_length`) and two new positions, and `masked` on
// both rows at once, each padded to an 8-position cache and 3 new positions (zeros, the mask
// 0 there, 1 over its real positions; a mask of the model's own is 1 over the real positions
// of both runs, as the loop feeds it). Every output's real positions (the logits of the new
// ones; the presents' past then new ones) must match within the warm-up tolerance, scaled to
// the outputs. One prover serves the forms one load tries: the export's rows and the results
// of nodes over the weights (a tied embedding's Transpose) are computed once for all of them.
class CacheMaskProver {
 public:
  CacheMaskProver(const Graph& original, const generate::DecoderContract& contract,
                  const ModelConfig& config);
  ~CacheMaskProver();
  CacheMaskProver(const CacheMaskProver&) = delete;
  CacheMaskProver& operator=(const CacheMaskProver&) = delete;

  // FAILED_PRECONDITION naming the output that moved, or the run that failed.
  absl::Status Prove(const Graph& masked, bool rows_share_length);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kiln::server
