// The toy decoder's generation loop for the scheduler's unit tests: a Generator over
// tests/unit/generate_toy.h's step (pages of 4 positions, past classes of 8), and the helpers
// that submit greedy requests and drain their streams.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "server/generate/decoder_contract.h"
#include "server/generate/generator.h"
#include "tests/unit/generate_toy.h"

namespace kiln::server::generate::testing {

// `step` as the last-position engines run it (server/serving/model_prefill.cc): logits of
// each row's last position only, [rows, 1, vocab]. Counts its calls in `calls`.
inline StepFn LastPositionOnly(StepFn step, std::shared_ptr<int64_t> calls) {
  return [step, calls](std::vector<Tensor> in, int64_t rows,
                       std::vector<Tensor> reuse) -> absl::StatusOr<std::vector<Tensor>> {
    ++*calls;
    const int64_t c = in[0].dim(1);
    // An appending toy step writes its logits into the tensor passed: give it the whole one.
    if (!reuse.empty()) reuse[0] = Tensor(DType::kFloat32, {rows, c, kVocab});
    ASSIGN_OR_RETURN(std::vector<Tensor> out, step(std::move(in), rows, std::move(reuse)));
    Tensor last(DType::kFloat32, {rows, 1, kVocab});
    for (int64_t b = 0; b < rows; ++b) {
      std::copy_n(out[0].data<float>() + ((b + 1) * c - 1) * kVocab, kVocab,
                  last.mutable_data<float>() + b * kVocab);
    }
    out[0] = std::move(last);
    return out;
  };
}

struct ToyOptions {
  int64_t kv_bytes = 1 << 20;
  int64_t max_rows = 4, max_sequences = 16, prefill_chunk = 8, prefill_budget = 256;
  StepFn step = ToyStep;
  bool appending = false;  // steps of 1 and prefill_chunk tokens through step_appending
  bool prefix_cache = true;
  StepFn step_appending = ToyAppendingStep;
  // Whole prefill chunks through these (GeneratorSetup::step_last): unset, none.
  StepFn step_last, step_last_appending;
  bool masked = true;  // the toy signature with its attention mask, or MasklessToySignature
  bool exact = false;  // GeneratorSetup::exact: steps at exact lengths, not classes of 8
  int lanes = 1;       // GeneratorSetup::lanes: steps of one iteration at once
  // GenerationConfig::keep_step_memory_ms: 0 here, so an idle loop frees its memory at once.
  int64_t keep_step_memory_ms = 0;
};

inline GeneratorSetup ToySetup(const ToyOptions& o) {
  GeneratorSetup s;
  s.signature = o.masked ? ToySignature() : MasklessToySignature();
  auto contract = FindDecoderContract(s.signature);
  EXPECT_TRUE(contract.ok()) << contract.status();
  s.contract = *contract;
  s.config.kv_cache_bytes = o.kv_bytes;
  s.config.page_tokens = 4;
  s.config.prefill_chunk = o.prefill_chunk;
  s.config.prefill_budget = o.prefill_budget;
  s.config.max_sequences = o.max_sequences;
  s.config.eos_token_ids = {};
  s.config.prefix_cache = o.prefix_cache;
  s.config.keep_step_memory_ms = o.keep_step_memory_ms;
  s.max_rows = o.max_rows;
  s.min_step = 1;
  s.max_step = 16;
  s.max_context = 200;
  s.step = o.step;
  if (o.appending) {
    s.step_appending = o.step_appending;
    for (int64_t b = 1; b <= o.max_rows; b *= 2) s.buckets.push_back(b);
    if (s.buckets.back() != o.max_rows) s.buckets.push_back(o.max_rows);
    s.append_counts = {1, o.prefill_chunk};
  }
  s.step_last = o.step_last;
  s.step_last_appending = o.step_last_appending;
  s.last_count = o.prefill_chunk;
  s.exact = o.exact;
  s.lanes = o.lanes;
  if (!o.exact) {
    s.past_size = [](int64_t n) { return std::max<int64_t>(8, (n + 7) / 8 * 8); };  // classes of 8
  }
  return s;
}

inline std::unique_ptr<Generator> ToyGenerator(const ToyOptions& o = {}) {
  auto g = Generator::Create(ToySetup(o), std::make_shared<MemoryAccount>("test", 0, nullptr));
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::move(*g) : nullptr;
}

struct Outcome {
  std::vector<int64_t> tokens;
  StreamChunk end;
};

inline Outcome Drain(GenerationStream& s) {
  Outcome o;
  for (;;) {
    StreamChunk c = s.Take(Clock::now() + std::chrono::seconds(30));
    for (const auto& t : c.tokens) o.tokens.push_back(t.id);
    if (c.done) {
      o.end = c;
      return o;
    }
  }
}

inline GenerateParams Greedy(std::vector<int64_t> prompt, int64_t max_tokens) {
  GenerateParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = max_tokens;
  return p;
}

inline std::vector<int64_t> Prompt(int64_t n, int64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = (seed * 31 + i * 7) % kVocab;
  return p;
}

}  // namespace kiln::server::generate::testing
