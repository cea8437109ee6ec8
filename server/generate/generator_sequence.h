// A sequence of the generation loop (server/generate/generator.h), shared by the scheduler
// (generator.cc) and the steps (generator_step.cc). Internal to server/generate/.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "server/generate/generator.h"

namespace kiln::server::generate {

struct Generator::Sequence {
  explicit Sequence(GenerateParams p)
      : params(std::move(p)), sampler(params.sampling, params.logprobs), submitted(Clock::now()) {}
  GenerateParams params;
  uint64_t id = 0;  // unique for the generator's life (HeldRows)
  std::shared_ptr<GenerationStream> stream = std::make_shared<GenerationStream>();
  std::vector<int64_t> tokens;  // prompt, then generated
  int64_t prompt_len = 0;
  int64_t limit = 0;   // tokens it may generate
  int64_t cached = 0;  // positions of `tokens` in its cache
  int64_t generated = 0;
  PageTable table;
  Sampler sampler;
  std::unordered_map<int64_t, int64_t> counts;  // token -> occurrences, for the penalties
  Clock::time_point submitted, last_token;
  bool running = false, ended = false, stopped = false;
  int64_t pending() const { return static_cast<int64_t>(tokens.size()) - cached; }
};

}  // namespace kiln::server::generate
