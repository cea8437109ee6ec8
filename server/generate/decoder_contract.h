// What a decoder model must look like for the server to run its generation loop, found from
// the model's signature: token ids in, logits out, and a key/value cache passed in as `past`
// tensors and returned grown as `present` tensors (the "decoder with past" every common
// exporter writes: past_key_values.{i}.key -> present.{i}.key, past.{i} -> present.{i}).
//
// The loop pads every step to a shape class and runs sequences of different lengths in one
// batch, so a cache slot that holds nothing must be invisible to the model: an attention mask
// over the past and new positions hides it. Position ids are fed when the model takes them; a
// model without them derives its positions itself, which the padding proof
// (server/model/padding_proof.h) then decides: from the mask (its cumulative sum) the padding
// stays hidden, from the cache's length it does not unless they are read from the mask at
// load (server/model/mask_positions.h). A model with no mask (and none added:
// server/model/cache_mask.h), or one the proof refuses, still generates, each step at its
// rows' exact cache length (GeneratorSetup::exact).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/common/model_signature.h"
#include "server/generate/generation_config.h"

namespace kiln::server::generate {

// One cache tensor: an input `past`, the output `present` it grows into, and its layout:
// [batch, outer..., past, inner...], the past axis found by its symbol.
struct CacheTensor {
  size_t input = 0, output = 0;  // indices in the signature
  std::string past_name, present_name;
  DType dtype = DType::kFloat32;
  int64_t axis = 2;       // the past (sequence) axis
  int64_t outer = 1;      // product of the dims between batch and the past axis
  int64_t inner = 1;      // product of the dims after it
  int64_t slot_bytes() const { return outer * inner * static_cast<int64_t>(DTypeSize(dtype)); }
};

struct DecoderContract {
  static constexpr size_t kAbsent = static_cast<size_t>(-1);
  size_t input_ids = 0;             // input indices
  size_t attention_mask = kAbsent;  // kAbsent: attention sees every cached position
  size_t position_ids = kAbsent;    // kAbsent: the model derives its positions
  bool has_mask() const { return attention_mask != kAbsent; }
  bool has_positions() const { return position_ids != kAbsent; }
  size_t logits = 0;                                           // output index
  DType ids_dtype = DType::kInt64, mask_dtype = DType::kInt64, positions_dtype = DType::kInt64;
  int64_t vocab = 0;
  std::string past_symbol;      // the cache's length dim ("past_sequence_length")
  std::string sequence_symbol;  // the new positions' dim ("sequence")
  std::vector<CacheTensor> cache;
  // Bytes one cached position takes across every cache tensor.
  int64_t slot_bytes() const;
};

// The contract `sig` satisfies, or FAILED_PRECONDITION saying what is missing ("no input
// 'input_ids'", "input 'past.0.key' has no present output") so GetModel can show why
// a model does not generate. Requires a dynamic signature (the past and sequence dims are
// served at any size).
// `names`: which tensors play which role (generation.tensors; the exporters' names by
// default).
absl::StatusOr<DecoderContract> FindDecoderContract(const ModelSignature& sig,
                                                    const DecoderTensorNames& names = {});

// "present" for "past" in a cache input's name (past_key_values.3.key -> present.3.key,
// past_key_3 -> present_key_3); empty when the name carries no "past".
std::string PresentNameFor(const std::string& past_name);

}  // namespace kiln::server::generate
