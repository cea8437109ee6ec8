// The generation loop's scheduler (server/generate/generator.h) driven by the toy decoder of
// tests/unit/generate_toy.h, its tokens checked against the toy's rule on the token list.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "server/generate/decoder_contract.h"
#include "server/generate/generator.h"
#include "server/generate/kv_cache.h"
#include "tests/unit/generate_toy.h"
#include "tests/unit/generate_toy_loop.h"

namespace kiln::server::generate {
namespace {

using namespace testing;  // NOLINT: the toy decoder

TEST(Generator, GreedyMatchesTheRuleAcrossPromptLengthsAndChunks) {
  auto g = ToyGenerator();
  for (int64_t n : {1, 3, 8, 9, 37}) {
    auto s = g->Submit(Greedy(Prompt(n, n), 40));
    ASSERT_TRUE(s.ok()) << s.status();
    Outcome o = Drain(**s);
    ASSERT_TRUE(o.end.status.ok()) << o.end.status;
    EXPECT_EQ(o.tokens, Expected(Prompt(n, n), 40)) << "prompt of " << n;
    EXPECT_EQ(o.end.finish_reason, "length");
    EXPECT_EQ(o.end.prompt_tokens, n);
    EXPECT_EQ(o.end.generated_tokens, 40);
  }
  GeneratorStats st = g->stats();
  EXPECT_EQ(st.pages_free, st.pages_total);
  EXPECT_EQ(st.running, 0);
}

// Prompts of 1, 3, 8, 9, 16, 17 and 37 tokens at once (chunks of 8: short ones, whole ones
// and both), each generating the reference's 12 tokens.
void ExpectPromptsOfEachLength(Generator& g) {
  std::vector<std::shared_ptr<GenerationStream>> streams;
  const std::vector<int64_t> lengths{1, 3, 8, 9, 16, 17, 37};
  for (int64_t n : lengths) {
    auto s = g.Submit(Greedy(Prompt(n, n), 12));
    ASSERT_TRUE(s.ok()) << s.status();
    streams.push_back(*s);
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    Outcome out = Drain(*streams[i]);
    ASSERT_TRUE(out.end.status.ok()) << out.end.status;
    EXPECT_EQ(out.tokens, Expected(Prompt(lengths[i], lengths[i]), 12)) << lengths[i];
  }
}

TEST(Generator, WholePromptChunksSampleFromTheLastPositionStep) {
  for (bool appending : {false, true}) {
    SCOPED_TRACE(appending);
    auto calls = std::make_shared<int64_t>(0);
    ToyOptions o;
    o.appending = appending;
    o.step_last = LastPositionOnly(ToyStep, calls);
    if (appending) o.step_last_appending = LastPositionOnly(ToyAppendingStep, calls);
    auto g = ToyGenerator(o);
    ExpectPromptsOfEachLength(*g);
    // Whole chunks of 8 (the remainder goes first): 8: 1, 9: 1, 16: 2, 17: 2, 37: 4.
    EXPECT_EQ(*calls, 10);
    EXPECT_EQ(g->stats().steps_last_position, 10);
  }
}

TEST(Generator, ShortChunksRunPaddedOnTheLastPositionStepCutByTheMask) {
  for (bool appending : {false, true}) {
    SCOPED_TRACE(appending);
    auto calls = std::make_shared<int64_t>(0);
    ToyOptions o;
    o.appending = appending;
    o.last_from = 2;
    o.step_last = LastRealPosition(ToyStep, calls);
    if (appending) o.step_last_appending = LastRealPosition(ToyAppendingStep, calls);
    auto g = ToyGenerator(o);
    ExpectPromptsOfEachLength(*g);
    // Chunks of 8, the remainder first: 3 (padded), 8, 9 (its one token is a decode-sized
    // step), 16: 2, 17: 2, 37: 5 padded and 4 whole.
    EXPECT_EQ(*calls, 12);
    const GeneratorStats st = g->stats();
    EXPECT_EQ(st.steps_last_position, 12);
    EXPECT_EQ(st.steps_last_padded, 2);
    if (appending) {
      EXPECT_EQ(st.steps_copied, 0) << "a padded chunk appends in place";
    }
  }
}

TEST(Generator, APaddedChunkOnALastPositionStepNotCutByTheMaskSamplesThePadding) {
  // The negative case: the engines keep the chunk's last position, padding included, so a
  // prompt of 3 tokens (padded to 8) samples from a padding position and goes wrong.
  auto calls = std::make_shared<int64_t>(0);
  ToyOptions o;
  o.last_from = 2;
  o.step_last = LastPositionOnly(ToyStep, calls);
  auto g = ToyGenerator(o);
  auto s = g->Submit(Greedy(Prompt(3, 3), 4));
  ASSERT_TRUE(s.ok()) << s.status();
  Outcome out = Drain(**s);
  ASSERT_TRUE(out.end.status.ok()) << out.end.status;
  EXPECT_NE(out.tokens, Expected(Prompt(3, 3), 4));
  EXPECT_EQ(*calls, 1);
}

TEST(Generator, ShortChunksNeedLastPositionEnginesAndAMask) {
  ToyOptions o;
  o.last_from = 2;  // no step_last
  EXPECT_FALSE(
      Generator::Create(ToySetup(o), std::make_shared<MemoryAccount>("t", 0, nullptr)).ok());
  o.step_last = ToyStep;
  o.last_from = 8;  // not below the chunk
  EXPECT_FALSE(
      Generator::Create(ToySetup(o), std::make_shared<MemoryAccount>("t", 0, nullptr)).ok());
  o.last_from = 1;  // one token is a decode step's size
  EXPECT_FALSE(
      Generator::Create(ToySetup(o), std::make_shared<MemoryAccount>("t", 0, nullptr)).ok());
  o.last_from = 2;
  o.masked = false;
  o.exact = true;
  o.step_last = nullptr;
  EXPECT_FALSE(
      Generator::Create(ToySetup(o), std::make_shared<MemoryAccount>("t", 0, nullptr)).ok());
}

TEST(Generator, ALastPositionStepGivingEveryPositionFailsItsSequence) {
  ToyOptions o;
  o.step_last = ToyStep;  // logits [1, 8, vocab] where the loop expects [1, 1, vocab]
  auto g = ToyGenerator(o);
  auto s = g->Submit(Greedy(Prompt(16, 1), 4));
  ASSERT_TRUE(s.ok()) << s.status();
  Outcome out = Drain(**s);
  EXPECT_EQ(out.end.status.code(), absl::StatusCode::kInternal) << out.end.status;
  EXPECT_NE(out.end.status.message().find("not [1, 1, "), std::string::npos) << out.end.status;
  auto t = g->Submit(Greedy(Prompt(5, 2), 4));  // the loop goes on
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Drain(**t).tokens, Expected(Prompt(5, 2), 4));
}

TEST(Generator, ConcurrentSequencesOfDifferentLengthsEachMatchAlone) {
  auto g = ToyGenerator();
  std::vector<std::shared_ptr<GenerationStream>> streams;
  for (int64_t i = 0; i < 10; ++i) {
    auto s = g->Submit(Greedy(Prompt(1 + i * 5, i), 20 + i));
    ASSERT_TRUE(s.ok()) << s.status();
    streams.push_back(*s);
  }
  for (int64_t i = 0; i < 10; ++i) {
    Outcome o = Drain(*streams[static_cast<size_t>(i)]);
    ASSERT_TRUE(o.end.status.ok()) << o.end.status;
    EXPECT_EQ(o.tokens, Expected(Prompt(1 + i * 5, i), 20 + i)) << "sequence " << i;
  }
}

TEST(Generator, AFullCachePreemptsAndRecomputesWithoutLosingTokens) {
  auto g = RunSixOverTwelvePages({});
  EXPECT_EQ(g->stats().pages_free, g->stats().pages_total);
}

TEST(Generator, ASequenceLargerThanTheWholeCacheFailsAloneAndTheRestRun) {
  ToyOptions o;
  o.kv_bytes = 4 * 4 * 8;  // 16 positions in all
  auto g = ToyGenerator(o);
  auto big = g->Submit(Greedy(Prompt(20, 1), 5));
  auto small = g->Submit(Greedy(Prompt(3, 2), 5));
  ASSERT_TRUE(big.ok() && small.ok());
  Outcome b = Drain(**big), s = Drain(**small);
  EXPECT_EQ(b.end.status.code(), absl::StatusCode::kResourceExhausted) << b.end.status;
  ASSERT_TRUE(s.end.status.ok()) << s.end.status;
  EXPECT_EQ(s.tokens, Expected(Prompt(3, 2), 5));
}

TEST(Generator, CancelAndDeadlineEndTheSequenceAndFreeItsPages) {
  ToyOptions o;
  o.step = [](std::vector<Tensor> in, int64_t rows, std::vector<Tensor>) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return ToyStep(std::move(in), rows);
  };
  auto g = ToyGenerator(o);
  auto s = g->Submit(Greedy(Prompt(5, 1), 150));
  ASSERT_TRUE(s.ok());
  StreamChunk first = (*s)->Take(Clock::now() + std::chrono::seconds(10));
  ASSERT_FALSE(first.tokens.empty());
  (*s)->Cancel();
  Outcome c = Drain(**s);
  EXPECT_EQ(c.end.status.code(), absl::StatusCode::kCancelled) << c.end.status;
  EXPECT_LT(c.tokens.size() + first.tokens.size(), 150u);

  GenerateParams p = Greedy(Prompt(5, 2), 150);
  p.deadline = Clock::now() + std::chrono::milliseconds(30);
  auto d = g->Submit(p);
  ASSERT_TRUE(d.ok());
  Outcome out = Drain(**d);
  EXPECT_EQ(out.end.status.code(), absl::StatusCode::kDeadlineExceeded) << out.end.status;
  EXPECT_GT(out.tokens.size(), 0u);
  EXPECT_EQ(g->stats().pages_free, g->stats().pages_total);
}

TEST(Generator, StopEndsRunningAndWaitingRequestsUnavailable) {
  ToyOptions o;
  o.max_sequences = 1;
  o.step = [](std::vector<Tensor> in, int64_t rows, std::vector<Tensor>) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return ToyStep(std::move(in), rows);
  };
  auto g = ToyGenerator(o);
  auto a = g->Submit(Greedy(Prompt(5, 1), 190));
  auto b = g->Submit(Greedy(Prompt(5, 2), 10));
  ASSERT_TRUE(a.ok() && b.ok());
  g->Stop("unloading");
  EXPECT_EQ(Drain(**a).end.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Drain(**b).end.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(g->Submit(Greedy({1}, 1)).status().code(), absl::StatusCode::kUnavailable);
}

TEST(Generator, StopAtAnyMomentEndsEveryRequest) {
  // Stop lands while sequences are admitted, preempted (a cache for two) and queued: every
  // stream still ends, none waits forever.
  for (int round = 0; round < 30; ++round) {
    ToyOptions o;
    o.kv_bytes = 6 * 4 * 8;
    o.step = [](std::vector<Tensor> in, int64_t rows, std::vector<Tensor>) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      return ToyStep(std::move(in), rows);
    };
    auto g = ToyGenerator(o);
    std::vector<std::shared_ptr<GenerationStream>> streams;
    for (int i = 0; i < 6; ++i) streams.push_back(*g->Submit(Greedy(Prompt(3 + i, i), 12)));
    std::this_thread::sleep_for(std::chrono::microseconds(300 * (round % 7)));
    g->Stop("test");
    for (auto& s : streams) {
      bool done = false;
      const auto until = Clock::now() + std::chrono::seconds(5);
      while (!done && Clock::now() < until) done = s->Take(until).done;
      ASSERT_TRUE(done) << "round " << round << ": a stream never ended";
    }
  }
}

TEST(Generator, AnIdleLoopHoldsNoStepBuffers) {
  // The step tensors are charged to the process budget; once nothing runs they are freed.
  const int64_t before = ProcessMemory()->used();
  auto g = ToyGenerator();
  Outcome o = Drain(**g->Submit(Greedy(Prompt(9, 1), 30)));
  ASSERT_TRUE(o.end.status.ok()) << o.end.status;
  int64_t after = -1;
  for (int i = 0; i < 200 && after != before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    after = ProcessMemory()->used();
  }
  EXPECT_EQ(after, before);
}

TEST(Generator, AnIdleLoopKeepsItsStepMemoryForTheNextBurstThenFreesIt) {
  const int64_t before = ProcessMemory()->used();
  ToyOptions o;
  o.appending = true;
  o.keep_step_memory_ms = 600;
  auto g = ToyGenerator(o);
  auto burst = [&] {
    for (int64_t n : {9, 20}) {
      Outcome out = Drain(**g->Submit(Greedy(Prompt(n, n), 30)));
      ASSERT_TRUE(out.end.status.ok()) << out.end.status;
      EXPECT_EQ(out.tokens, Expected(Prompt(n, n), 30));
    }
  };
  burst();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // idle, within the window
  const int64_t kept = g->stats().step_buffer_bytes;
  EXPECT_GT(kept, 0);
  EXPECT_EQ(g->stats().running, 0);
  burst();  // the same shapes again, on the memory kept
  int64_t after = -1;
  for (int i = 0; i < 400 && after != before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    after = ProcessMemory()->used();
  }
  EXPECT_EQ(after, before);  // negative: past the window nothing is held
  EXPECT_EQ(g->stats().step_buffer_bytes, 0);
}

TEST(Generator, AFailedStepEndsItsSequencesWithTheError) {
  ToyOptions o;
  o.step = [](std::vector<Tensor>, int64_t, std::vector<Tensor>) -> absl::StatusOr<std::vector<Tensor>> {
    return absl::ResourceExhaustedError("no memory for the step");
  };
  auto g = ToyGenerator(o);
  auto s = g->Submit(Greedy(Prompt(3, 1), 4));
  ASSERT_TRUE(s.ok());
  Outcome out = Drain(**s);
  EXPECT_EQ(out.end.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(out.tokens.empty());
  EXPECT_EQ(g->stats().pages_free, g->stats().pages_total);
}

TEST(Generator, StopTokensAndStopSequencesEndWithReasonStop) {
  auto g = ToyGenerator();
  const std::vector<int64_t> want = Expected(Prompt(6, 3), 20);
  GenerateParams p = Greedy(Prompt(6, 3), 20);
  p.stop_token_ids = {want[4]};
  Outcome o = Drain(**g->Submit(p));
  const auto first = std::find(want.begin(), want.end(), want[4]) - want.begin();
  EXPECT_EQ(o.tokens, std::vector<int64_t>(want.begin(), want.begin() + first + 1));
  EXPECT_EQ(o.end.finish_reason, "stop");

  GenerateParams q = Greedy(Prompt(6, 3), 20);
  q.stop_sequences = {{want[6], want[7]}};
  Outcome r = Drain(**g->Submit(q));
  ASSERT_GE(r.tokens.size(), 2u);
  EXPECT_LE(r.tokens.size(), 8u);
  EXPECT_EQ(r.end.finish_reason, "stop");
}

TEST(Generator, RefusesBadRequestsNamingTheField) {
  auto g = ToyGenerator();
  EXPECT_EQ(g->Submit(Greedy({}, 4)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g->Submit(Greedy({kVocab}, 4)).status().message().find("vocabulary"),
            std::string::npos);
  EXPECT_NE(g->Submit(Greedy(Prompt(200, 1), 4)).status().message().find("context"),
            std::string::npos);
  EXPECT_NE(g->Submit(Greedy({1}, 0)).status().message().find("max_tokens"), std::string::npos);
  GenerateParams p = Greedy({1}, 4);
  p.sampling.top_p = 0;
  EXPECT_NE(g->Submit(p).status().message().find("top_p"), std::string::npos);
}

TEST(Generator, ALongRequestIsCutAtTheContextWithReasonLength) {
  auto g = ToyGenerator();
  Outcome o = Drain(**g->Submit(Greedy(Prompt(190, 1), 50)));
  ASSERT_TRUE(o.end.status.ok()) << o.end.status;
  EXPECT_EQ(o.tokens.size(), 10u);  // 190 + 10 = the context of 200
  EXPECT_EQ(o.end.finish_reason, "length");
}

// The tokens each step fed per row, in order, for a long prompt arriving while another
// sequence decodes, with prefill_budget `budget` (chunks of 8).
std::vector<int64_t> StepSizesWithPrefillBudget(int64_t budget) {
  auto sizes = std::make_shared<std::vector<int64_t>>();
  auto mu = std::make_shared<std::mutex>();
  ToyOptions o;
  o.prefill_budget = budget;
  o.step = [sizes, mu](std::vector<Tensor> in, int64_t rows, std::vector<Tensor>) {
    {
      std::lock_guard<std::mutex> lk(*mu);
      sizes->push_back(in[0].dim(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // A still runs when B comes
    return ToyStep(std::move(in), rows);
  };
  auto g = ToyGenerator(o);
  auto a = g->Submit(Greedy(Prompt(2, 1), 100));
  EXPECT_TRUE(a.ok());
  size_t got = (*a)->Take(Clock::now() + std::chrono::seconds(10)).tokens.size();
  EXPECT_GT(got, 0u);
  auto b = g->Submit(Greedy(Prompt(40, 2), 2));
  EXPECT_EQ(Drain(**b).tokens, Expected(Prompt(40, 2), 2));
  got += Drain(**a).tokens.size();
  EXPECT_EQ(got, 100u);
  std::lock_guard<std::mutex> lk(*mu);
  return *sizes;
}

TEST(Generator, ThePrefillBudgetInterleavesLongPromptsWithDecodes) {
  // Budget 8: one chunk of B's prompt, then A's decode, then the next chunk.
  std::vector<int64_t> one = StepSizesWithPrefillBudget(8);
  auto first = std::find(one.begin(), one.end(), 8);
  ASSERT_NE(first, one.end());
  EXPECT_EQ(std::vector<int64_t>(first, first + 4), (std::vector<int64_t>{8, 1, 8, 1}));
  // Budget 40: the whole prompt in one iteration, five chunks back to back.
  std::vector<int64_t> all = StepSizesWithPrefillBudget(40);
  first = std::find(all.begin(), all.end(), 8);
  ASSERT_NE(first, all.end());
  EXPECT_EQ(std::vector<int64_t>(first, first + 5), std::vector<int64_t>(5, 8));
}

TEST(Generator, SameSeedSameTokensAndLogprobsAreLogProbabilities) {
  auto g = ToyGenerator();
  auto run = [&](uint64_t seed) {
    GenerateParams p = Greedy(Prompt(4, 1), 12);
    p.sampling.temperature = 1.0;
    p.sampling.seed = seed;
    p.logprobs = true;
    auto s = g->Submit(p);
    EXPECT_TRUE(s.ok());
    std::vector<GeneratedToken> all;
    for (;;) {
      StreamChunk c = (*s)->Take(Clock::now() + std::chrono::seconds(10));
      all.insert(all.end(), c.tokens.begin(), c.tokens.end());
      if (c.done) break;
    }
    return all;
  };
  auto a = run(7), b = run(7);
  ASSERT_EQ(a.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id);
    EXPECT_LE(a[i].logprob, 0.0);
  }
}

}  // namespace
}  // namespace kiln::server::generate

namespace kiln::server::generate {
namespace {

using namespace testing;  // NOLINT: the toy decoder

// Appending steps keep each group's rows in the presents between steps and bring them up to
// date from the pages: a row that changed hands, a padding row (3 sequences at bucket 4), a
// preempted and recomputed sequence or a prompt remainder that copies must all still give
// the rule's tokens.
TEST(GeneratorAppending, ConcurrentSequencesMatchTheRuleWithRowsKeptInPlace) {
  ToyOptions o;
  o.appending = true;
  o.max_rows = 4;
  auto g = ToyGenerator(o);
  std::vector<std::shared_ptr<GenerationStream>> streams;
  for (int64_t i = 0; i < 11; ++i) {
    auto s = g->Submit(Greedy(Prompt(1 + i * 5, i), 20 + 3 * i));
    ASSERT_TRUE(s.ok()) << s.status();
    streams.push_back(*s);
  }
  for (int64_t i = 0; i < 11; ++i) {
    Outcome out = Drain(*streams[static_cast<size_t>(i)]);
    ASSERT_TRUE(out.end.status.ok()) << out.end.status;
    EXPECT_EQ(out.tokens, Expected(Prompt(1 + i * 5, i), 20 + 3 * i)) << "sequence " << i;
  }
  const GeneratorStats st = g->stats();
  EXPECT_GT(st.steps_in_place, 0);
  EXPECT_GT(st.steps_copied, 0) << "prompt remainders that are no step class copy";
  EXPECT_TRUE(g->appends_in_place());
}

TEST(GeneratorAppending, PreemptedSequencesAreRecomputedNotReadFromStaleRows) {
  ToyOptions o;
  o.appending = true;
  EXPECT_GT(RunSixOverTwelvePages(o)->stats().steps_in_place, 0);
}

TEST(GeneratorAppending, AFailedAppendingStepEndsItsGroupAndTheNextStartsAfresh) {
  // The fifth appending step fails (mid-decode): its sequence ends with the error, and the
  // presents went with the failed run, so the next sequence (same group, same shape) must not
  // take their rows as held.
  ToyOptions o;
  o.appending = true;
  auto calls = std::make_shared<std::atomic<int>>(0);
  o.step_appending = [calls](std::vector<Tensor> in, int64_t rows,
                             std::vector<Tensor> out) -> absl::StatusOr<std::vector<Tensor>> {
    if (++*calls == 5) return absl::InternalError("the engine broke");
    return ToyAppendingStep(std::move(in), rows, std::move(out));
  };
  auto g = ToyGenerator(o);
  auto first = g->Submit(Greedy(Prompt(8, 3), 10));
  ASSERT_TRUE(first.ok());
  Outcome a = Drain(**first);
  EXPECT_EQ(a.end.status.code(), absl::StatusCode::kInternal) << a.end.status;
  EXPECT_EQ(a.tokens, Expected(Prompt(8, 3), static_cast<int64_t>(a.tokens.size())));
  auto second = g->Submit(Greedy(Prompt(8, 4), 10));
  ASSERT_TRUE(second.ok());
  Outcome b = Drain(**second);
  ASSERT_TRUE(b.end.status.ok()) << b.end.status;
  EXPECT_EQ(b.tokens, Expected(Prompt(8, 4), 10));
}

TEST(GeneratorAppending, OutputsNotPassedAtTheirShapesFailTheStepNotTheLoop) {
  // The appending toy refuses outputs that are not its shapes, as an engine does: a loop that
  // passed none would fail every sequence; this one passes them, and a plain step still runs
  // the remainders.
  ToyOptions o;
  o.appending = true;
  o.step = [](std::vector<Tensor> in, int64_t rows, std::vector<Tensor>) {
    return ToyAppendingStep(std::move(in), rows, {});  // no outputs: refused
  };
  auto g = ToyGenerator(o);
  auto s = g->Submit(Greedy(Prompt(3, 1), 4));  // 3 tokens: a copying step, which fails
  ASSERT_TRUE(s.ok());
  Outcome out = Drain(**s);
  EXPECT_EQ(out.end.status.code(), absl::StatusCode::kInvalidArgument) << out.end.status;
  auto t = g->Submit(Greedy(Prompt(8, 2), 6));  // a whole chunk and decodes: in place
  ASSERT_TRUE(t.ok());
  Outcome ok = Drain(**t);
  ASSERT_TRUE(ok.end.status.ok()) << ok.end.status;
  EXPECT_EQ(ok.tokens, Expected(Prompt(8, 2), 6));
}

}  // namespace
}  // namespace kiln::server::generate
