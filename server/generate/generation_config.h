// Model config `generation:` (docs/generation.md): how the server runs a decoder's
// generation loop. Plain data, so the model config can hold it without the scheduler.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace kiln::server::generate {

// Which of the model's tensors play the decoder contract's roles (decoder_contract.h): the
// common exporters' names unless the config's `generation.tensors` says otherwise. A cache
// input's present output is `cache[input]` when given, else its name with "past" made
// "present".
struct DecoderTensorNames {
  std::string input_ids = "input_ids", attention_mask = "attention_mask",
              position_ids = "position_ids", logits = "logits";
  std::map<std::string, std::string> cache;  // past input -> present output
};

// Model config `generation:` (docs/generation.md).
struct GenerationConfig {
  DecoderTensorNames tensors;
  std::string mode = "auto";  // auto: generate when the model fits the contract; off
  int64_t max_sequences = 16;  // running at once (more wait)
  int64_t kv_cache_bytes = int64_t{256} << 20;
  int64_t page_tokens = 16;
  int64_t prefill_chunk = 64;  // prompt tokens per engine run
  // Prompt tokens read per scheduler iteration (in chunks, oldest sequence first) before the
  // running sequences decode their next token: more reads prompts sooner when many arrive,
  // less keeps the running streams' inter-token latency lower.
  int64_t prefill_budget = 256;
  int64_t max_new_tokens = 4096;  // a request's max_tokens above this is refused
  std::vector<int64_t> eos_token_ids;  // end a sequence (unless a request ignores them)
  // auto: steps append to the cache held in the engine's outputs when every engine can
  // (runtime::Engine::RunAppending); off: every step copies the cache in and out.
  std::string kv_in_place = "auto";
  // A prompt that starts with tokens another sequence computed takes their pages instead of
  // recomputing them (whole pages; kv_cache.h, prefix sharing).
  bool prefix_cache = true;
  // last: whole prefill chunks run on engines that compute only the logits of the chunk's
  // last position (the model cut back from its logits, proven at load); all: every step
  // computes every position's logits.
  std::string prefill_logits = "last";
  // auto: a decoder exported without an attention mask gets one (server/model/cache_mask.h),
  // and one that counts its positions from its cache's length reads them from its mask
  // (server/model/mask_positions.h), each proven at load, so their steps pad to shape classes;
  // off: they run at exact cache lengths.
  std::string cache_mask = "auto";
  // How long an idle loop keeps its step buffers' memory (zeroed for reuse, charged to the
  // memory budget) for the next burst before freeing it; 0 frees it at once.
  int64_t keep_step_memory_ms = 10000;
};

// INVALID_ARGUMENT "'generation.<key>': <why>" for a value outside its range (the model
// config's check and the generator's own, so the two cannot drift).
absl::Status ValidateGenerationConfig(const GenerationConfig& c);

}  // namespace kiln::server::generate
