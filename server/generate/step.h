// One engine step of the generation loop, as tensors: the inputs for a group of sequences
// (each feeding its next `count` tokens; one token when decoding, a chunk of the prompt when
// prefilling) and, once it ran, their new cache positions stored into their pages.
//
// The past is padded to one size P for the group (a shape class: server/model/padding.h), each
// row's cache filling its first positions. The attention mask is 1 over a row's cached
// positions and its new ones and 0 over the padding between, and the position ids continue
// each row's own sequence, so rows of different lengths share one batch and one engine.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "ir/tensor.h"
#include "server/common/model_signature.h"
#include "server/generate/decoder_contract.h"
#include "server/generate/kv_cache.h"
#include "server/generate/spare_memory.h"

namespace kiln::server::generate {

struct StepRow {
  const std::vector<int64_t>* tokens = nullptr;  // the sequence so far
  int64_t cached = 0;  // positions already in its cache: it feeds tokens[cached, cached + count)
  const PageTable* table = nullptr;
  uint64_t id = 0;  // the sequence, unique for the generator's life (appending steps)
};

// What an appending step's present outputs hold, row by row: the sequence (StepRow::id, 0 for
// none) and how many of its first positions are in place.
struct HeldRows {
  std::vector<uint64_t> id;
  std::vector<int64_t> positions;
};

// Fills `in` with the inputs, in signature order, of a step feeding `count` tokens of every
// row with the past padded to `past` positions (>= every row's `cached`). Tensors already in
// `in` of the right dtype and shape that nothing else holds are written over (a step that
// repeats its shape reuses its buffers: a fresh multi-MiB buffer costs its page faults);
// the others are made.
// `width` (when above `count`): the step runs at that many new positions, those after
// `count` padding as a shape class pads them (token 0 at position 0, mask 0): a prompt's
// short last chunk on an engine of a full chunk's size.
absl::Status BuildStepInputs(const DecoderContract& contract, const ModelSignature& sig,
                             const KvCache& cache, const std::vector<StepRow>& rows, int64_t count,
                             int64_t past, std::vector<Tensor>& in, int64_t width = 0);

// A step through runtime::Engine::RunAppending: the cache lives in the present outputs,
// which the engine appends the new positions to, instead of being copied into the past
// inputs and again into the presents at every step. Fills `in` as BuildStepInputs does, with
// `total_rows` rows (those past rows.size() are padding: token 0 at position 0, seeing only
// itself; the engine runs at a batch bucket), the past inputs as zeros never read (one
// tensor per shape), and brings `out` (the presents and the logits, kept from the last step
// of this shape) up to date: a row still holding its sequence gets only the positions cached
// since (one per decode step), any other row its whole cache and zeros up to `past` (the
// mask hides them, but a masked value still meets a zero weight, so it must be finite).
// `logit_positions`: the logits' positions (`count`, or 1 for an engine that computes the last
// position's only). `width`: as BuildStepInputs'. New tensors are made on `spare`'s memory where it
// has some. FAILED_PRECONDITION when the model has outputs besides the logits and the presents.
absl::Status BuildAppendingStep(const DecoderContract& contract, const ModelSignature& sig,
                                const KvCache& cache, const std::vector<StepRow>& rows,
                                int64_t total_rows, int64_t count, int64_t logit_positions,
                                int64_t past, std::vector<Tensor>& in, std::vector<Tensor>& out,
                                HeldRows& held, SpareMemory* spare = nullptr, int64_t width = 0);

// Stores each row's `count` new positions (at [past, past + count) of the present outputs,
// which hold past + max(width, count) positions) into its pages at [cached, cached + count).
// INTERNAL when the outputs are not the shapes the contract promises. Precondition: every
// row's table has pages for cached + count.
absl::Status StoreStep(const DecoderContract& contract, KvCache& cache,
                       const std::vector<StepRow>& rows, int64_t count, int64_t past,
                       const std::vector<Tensor>& outputs, int64_t width = 0);

}  // namespace kiln::server::generate
