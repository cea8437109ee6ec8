// Choosing the next token from a step's logits, as the common serving APIs define it:
// penalties on the tokens already in the sequence, then temperature, top-k and top-p, then
// a draw from the distribution left (or its most likely token: greedy).
//
//   repetition_penalty r (1: off): a seen token's logit is divided by r when positive and
//     multiplied by r when not (the CTRL / Hugging Face rule);
//   frequency_penalty f, presence_penalty p (0: off): a seen token's logit drops by
//     f x its count, and by p once (the OpenAI rule);
//   temperature 0 is greedy (ties go to the lowest id); top_k 0 and top_p 1 keep every token.
//
// Each sequence draws from its own generator seeded by the request (same seed, same prompt:
// same tokens) or, without a seed, from the process's random device.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace kiln::server::generate {

struct SamplingParams {
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: every token
  double top_p = 1.0;        // (0, 1]
  double repetition_penalty = 1.0;
  double frequency_penalty = 0.0;
  double presence_penalty = 0.0;
  std::optional<uint64_t> seed;
};

// INVALID_ARGUMENT naming the field for a value outside its range.
absl::Status ValidateSampling(const SamplingParams& p);

struct Sampled {
  int64_t token = 0;
  // log P(token) under the model's distribution after the penalties (before temperature,
  // top-k and top-p, which shape the draw, not the model's belief).
  double logprob = 0.0;
};

class Sampler {
 public:
  // `logprobs`: compute Sampled::logprob (a pass over the vocabulary per token; 0 otherwise).
  explicit Sampler(const SamplingParams& params, bool logprobs = true);
  // `logits`: one position's row of `vocab` values. `counts`: how often each token occurs
  // in the sequence so far (prompt and generated), for the penalties.
  Sampled Next(const float* logits, int64_t vocab,
               const std::unordered_map<int64_t, int64_t>& counts);

 private:
  SamplingParams params_;
  bool logprobs_;
  std::mt19937_64 rng_;
  std::vector<double> work_;    // adjusted logits, per call
  std::vector<int64_t> order_;  // candidate ids, per call
};

}  // namespace kiln::server::generate
