// The toy decoder's generation loop for the scheduler's unit tests: a Generator over
// tests/unit/generate_toy.h's step (pages of 4 positions, past classes of 8), and the helpers
// that submit greedy requests and drain their streams, and a run of six sequences over a cache
// too small for them (preemption).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
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

// A last-position step cut by the mask (compiler/shape/last_position.h's `mask`): the logits
// of the last real new position of each row, the count of ones among row 0's last `c` mask
// entries (all real: the last position), as the engines of such a cut give them.
inline StepFn LastRealPosition(StepFn step, std::shared_ptr<int64_t> calls) {
  return [step, calls](std::vector<Tensor> in, int64_t rows,
                       std::vector<Tensor> reuse) -> absl::StatusOr<std::vector<Tensor>> {
    ++*calls;
    const int64_t c = in[0].dim(1), width = in[1].dim(1);
    int64_t real = 0;
    for (int64_t k = width - c; k < width; ++k) real += in[1].GetInt(k) != 0;
    const int64_t at = real == 0 ? c - 1 : real - 1;
    if (!reuse.empty()) reuse[0] = Tensor(DType::kFloat32, {rows, c, kVocab});
    ASSIGN_OR_RETURN(std::vector<Tensor> out, step(std::move(in), rows, std::move(reuse)));
    Tensor last(DType::kFloat32, {rows, 1, kVocab});
    for (int64_t b = 0; b < rows; ++b) {
      std::copy_n(out[0].data<float>() + (b * c + at) * kVocab, kVocab,
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
  int64_t last_from = 0;  // GeneratorSetup::last_from: short chunks padded to step_last
  bool masked = true;     // the toy signature with its attention mask, or MasklessToySignature
  bool exact = false;     // GeneratorSetup::exact: steps at exact lengths, not classes of 8
  int lanes = 1;          // GeneratorSetup::lanes: steps of one iteration at once
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
  s.last_from = o.last_from;
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

// Six sequences that each grow to 40 positions over 48 (2 floats x 4 bytes per position, 4
// positions a page: 12 pages): preempted and recomputed, each still the rule's tokens. The
// steps wait until all six are queued: otherwise, on a loaded host, the first sequences could
// finish before the others arrive and nothing would compete for the cache.
inline std::unique_ptr<Generator> RunSixOverTwelvePages(ToyOptions o) {
  o.kv_bytes = 12 * 4 * 8;
  auto queued = std::make_shared<std::atomic<bool>>(false);
  auto gated = [queued](StepFn step) -> StepFn {
    return [queued, step](std::vector<Tensor> in, int64_t rows, std::vector<Tensor> out) {
      while (!queued->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return step(std::move(in), rows, std::move(out));
    };
  };
  o.step = gated(o.step);
  o.step_appending = gated(o.step_appending);
  auto g = ToyGenerator(o);
  std::vector<std::shared_ptr<GenerationStream>> streams;
  for (int64_t i = 0; i < 6; ++i) {
    auto s = g->Submit(Greedy(Prompt(4 + i, i), 30));
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) streams.push_back(*s);
  }
  *queued = true;
  for (size_t i = 0; i < streams.size(); ++i) {
    Outcome out = Drain(*streams[i]);
    EXPECT_TRUE(out.end.status.ok()) << out.end.status;
    EXPECT_EQ(out.tokens,
              Expected(Prompt(4 + static_cast<int64_t>(i), static_cast<int64_t>(i)), 30))
        << "sequence " << i;
  }
  EXPECT_GT(g->stats().preemptions, 0);
  return g;
}

}  // namespace kiln::server::generate::testing
