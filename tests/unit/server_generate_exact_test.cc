// The generation loop at exact cache lengths (GeneratorSetup::exact): for a decoder that
// cannot be padded (no attention mask, or positions counted from the cache's length), every
// step runs at its rows' own cache length, a prompt's first step with an empty cache, and a
// decode step batches only rows of one length. The toy step used here sees every cached
// position, so a padded past reads as positions out of order and fails the step: the same
// step under the padded loop is the negative case.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "server/generate/decoder_contract.h"
#include "server/generate/generator.h"
#include "server/generate/kv_cache.h"
#include "server/generate/step.h"
#include "tests/unit/generate_toy.h"
#include "tests/unit/generate_toy_loop.h"

namespace kiln::server::generate {
namespace {

using namespace testing;  // NOLINT: the toy decoder

// The shapes (rows, cache length) each step ran at, recorded around `step`.
struct Seen {
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> steps;
};

StepFn Recording(StepFn step, std::shared_ptr<Seen> seen, size_t past_input) {
  return [step, seen, past_input](std::vector<Tensor> in, int64_t rows, std::vector<Tensor> out) {
    {
      std::lock_guard<std::mutex> lk(seen->mu);
      seen->steps.emplace_back(rows, in[past_input].dim(2));
    }
    return step(std::move(in), rows, std::move(out));
  };
}

// Sequences of several prompt lengths at once, three of them alike: each the rule's tokens.
void ExpectTheRule(Generator& g) {
  std::vector<int64_t> lengths{1, 5, 5, 5, 9, 23};
  std::vector<std::shared_ptr<GenerationStream>> streams;
  for (size_t i = 0; i < lengths.size(); ++i) {
    auto s = g.Submit(Greedy(Prompt(lengths[i], static_cast<int64_t>(i)), 24));
    ASSERT_TRUE(s.ok()) << s.status();
    streams.push_back(*s);
  }
  for (size_t i = 0; i < lengths.size(); ++i) {
    Outcome o = Drain(*streams[i]);
    ASSERT_TRUE(o.end.status.ok()) << "sequence " << i << ": " << o.end.status;
    EXPECT_EQ(o.tokens, Expected(Prompt(lengths[i], static_cast<int64_t>(i)), 24))
        << "sequence " << i;
  }
}

TEST(GeneratorExact, AMasklessDecoderMatchesTheRuleAtExactLengths) {
  auto seen = std::make_shared<Seen>();
  ToyOptions o;
  o.masked = false;
  o.exact = true;
  o.step = Recording(SeesEveryPosition(-1), seen, 2);
  auto g = ToyGenerator(o);
  ASSERT_NE(g, nullptr);
  ExpectTheRule(*g);
  std::lock_guard<std::mutex> lk(seen->mu);
  // First steps with an empty cache, and decode steps of several rows (the prompts alike).
  EXPECT_TRUE(std::any_of(seen->steps.begin(), seen->steps.end(),
                          [](const auto& s) { return s.second == 0; }));
  EXPECT_TRUE(std::any_of(seen->steps.begin(), seen->steps.end(), [](const auto& s) {
    return s.first > 1;
  })) << "rows of one length were not batched";
  EXPECT_EQ(g->stats().pages_free, g->stats().pages_total);
}

// A masked model that ignores its mask (as one counting positions from the cache's length
// does): the padded loop gets it wrong, the exact one right.
TEST(GeneratorExact, AModelThatSeesThePaddingNeedsExactLengths) {
  ToyOptions o;
  o.step = SeesEveryPosition(1);
  o.exact = true;
  auto exact = ToyGenerator(o);
  ASSERT_NE(exact, nullptr);
  ExpectTheRule(*exact);

  o.exact = false;
  auto padded = ToyGenerator(o);
  ASSERT_NE(padded, nullptr);
  auto s = padded->Submit(Greedy(Prompt(5, 1), 8));
  ASSERT_TRUE(s.ok()) << s.status();
  Outcome out = Drain(**s);
  EXPECT_TRUE(!out.end.status.ok() || out.tokens != Expected(Prompt(5, 1), 8))
      << "a padded past went unseen: the negative case proves nothing";
}

TEST(GeneratorExact, SetupsThatCannotWorkAreRefused) {
  ToyOptions o;
  o.masked = false;  // no mask, padded: nothing would hide the padding
  GeneratorSetup s = ToySetup(o);
  auto g = Generator::Create(s, std::make_shared<MemoryAccount>("t", 0, nullptr));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(g.status().message().find("attention mask"), std::string::npos) << g.status();
  // Exact lengths with the appending step (which keeps padded presents between steps).
  o.exact = true;
  o.appending = true;
  auto a = Generator::Create(ToySetup(o), std::make_shared<MemoryAccount>("t", 0, nullptr));
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition) << a.status();
}

TEST(StepInputsExact, NoMaskFedAndRowsMustHaveTheStepsLength) {
  const ModelSignature sig = MasklessToySignature();
  auto contract = FindDecoderContract(sig);
  ASSERT_TRUE(contract.ok()) << contract.status();
  EXPECT_FALSE(contract->has_mask());
  auto cache =
      KvCache::Create(*contract, 4, 8 * 4 * 8, std::make_shared<MemoryAccount>("t", 0, nullptr));
  ASSERT_TRUE(cache.ok());
  PageTable a, b;
  ASSERT_TRUE((*cache)->Grow(a, 4) && (*cache)->Grow(b, 4));
  std::vector<int64_t> ta{1, 2, 3, 4}, tb{5, 6, 7, 8};
  std::vector<Tensor> in;
  ASSERT_TRUE(
      BuildStepInputs(*contract, sig, **cache, {{&ta, 3, &a}, {&tb, 3, &b}}, 1, 3, in).ok());
  ASSERT_EQ(in.size(), 3u);  // ids, positions, past: no mask
  EXPECT_EQ(in[2].shape(), (std::vector<int64_t>{2, 1, 3, 2}));
  EXPECT_EQ(in[1].GetInt(1), 3);
  // A row shorter than the step's past would be padded, which nothing hides.
  std::vector<Tensor> none;
  absl::Status st =
      BuildStepInputs(*contract, sig, **cache, {{&ta, 2, &a}, {&tb, 3, &b}}, 1, 3, none);
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
  // And the appending step, which keeps each row's cache padded, refuses the model.
  std::vector<Tensor> out;
  HeldRows held;
  st = BuildAppendingStep(*contract, sig, **cache, {{&ta, 3, &a}}, 1, 1, 1, 3, in, out, held);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
}

// The loop's step memory stays bounded by its shapes while it runs, even where a group's
// shape changes every step (at exact lengths the past grows by one per token: its old
// buffers must not pile up), and is none once the loop is idle.
TEST(GeneratorMemory, HeldStepBytesStayBoundedAndGoWhenIdle) {
  for (bool exact : {true, false}) {
    struct Probe {
      std::mutex mu;
      Generator* g = nullptr;
      int64_t most_step = 0, most_held = 0;
    };
    auto probe = std::make_shared<Probe>();
    auto measure = [probe](StepFn step) -> StepFn {
      return [probe, step](std::vector<Tensor> in, int64_t rows, std::vector<Tensor> out) {
        int64_t bytes = 0;  // the step's inputs and outputs
        for (const Tensor& t : in) bytes += static_cast<int64_t>(t.nbytes());
        {
          std::lock_guard<std::mutex> lk(probe->mu);
          if (probe->g) {
            probe->most_held = std::max(probe->most_held, probe->g->stats().step_buffer_bytes);
          }
        }
        absl::StatusOr<std::vector<Tensor>> r = step(std::move(in), rows, std::move(out));
        if (r.ok()) {
          for (const Tensor& t : *r) bytes += static_cast<int64_t>(t.nbytes());
        }
        std::lock_guard<std::mutex> lk(probe->mu);
        probe->most_step = std::max(probe->most_step, bytes);
        return r;
      };
    };
    ToyOptions o;
    o.exact = exact;
    o.masked = !exact;
    o.step = measure(exact ? SeesEveryPosition(-1) : ToyStep);
    o.appending = !exact;
    o.step_appending = measure(ToyAppendingStep);
    auto g = ToyGenerator(o);
    ASSERT_NE(g, nullptr);
    {
      std::lock_guard<std::mutex> lk(probe->mu);
      probe->g = g.get();
    }
    auto s = g->Submit(Greedy(Prompt(5, 3), 40));
    ASSERT_TRUE(s.ok()) << s.status();
    Outcome out = Drain(**s);
    ASSERT_TRUE(out.end.status.ok()) << out.end.status;
    EXPECT_EQ(out.tokens, Expected(Prompt(5, 3), 40));
    std::lock_guard<std::mutex> lk(probe->mu);
    // One sequence: its decode group's buffers and at most two prefill shapes', and spare
    // memory up to as much again (40 steps of old buffers kept would be 10x more).
    EXPECT_GT(probe->most_held, 0) << "exact " << exact;
    EXPECT_LE(probe->most_held, 6 * probe->most_step) << "exact " << exact;
    probe->g = nullptr;
    for (int i = 0; i < 200 && g->stats().step_buffer_bytes != 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(g->stats().step_buffer_bytes, 0) << "exact " << exact;
  }
}

}  // namespace
}  // namespace kiln::server::generate
