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

namespace kiln::server::generate {

struct StepRow {
  const std::vector<int64_t>* tokens = nullptr;  // the sequence so far
  int64_t cached = 0;  // positions already in its cache: it feeds tokens[cached, cached + count)
  const PageTable* table = nullptr;
};

// Fills `in` with the inputs, in signature order, of a step feeding `count` tokens of every
// row with the past padded to `past` positions (>= every row's `cached`). Tensors already in
// `in` of the right dtype and shape that nothing else holds are written over (a step that
// repeats its shape reuses its buffers: a fresh multi-MiB buffer costs its page faults);
// the others are made.
absl::Status BuildStepInputs(const DecoderContract& contract, const ModelSignature& sig,
                             const KvCache& cache, const std::vector<StepRow>& rows, int64_t count,
                             int64_t past, std::vector<Tensor>& in);

// Stores each row's `count` new positions (at [past, past + count) of the present outputs)
// into its pages at [cached, cached + count). INTERNAL when the outputs are not the shapes
// the contract promises. Precondition: every row's table has pages for cached + count.
absl::Status StoreStep(const DecoderContract& contract, KvCache& cache,
                       const std::vector<StepRow>& rows, int64_t count, int64_t past,
                       const std::vector<Tensor>& outputs);

}  // namespace kiln::server::generate
