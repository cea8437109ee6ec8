// The generation loop's pieces (server/generate/): the sampler, the paged cache, the decoder
// contract, and the scheduler driven by a small model written here whose next token depends
// on every visible cached position, so a wrong page, mask, position or padding changes the
// tokens. Its answers are checked against the same rule applied to the token list directly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <mutex>
#include <thread>

#include "server/generate/decoder_contract.h"
#include "server/generate/generator.h"
#include "server/generate/kv_cache.h"
#include "server/generate/sampler.h"
#include "server/generate/step.h"

namespace kiln::server::generate {
namespace {

constexpr int64_t kVocab = 97;

// [batch, seq] ids/positions, mask over "past + seq", one cache tensor [batch, 1, past, 2].
ModelSignature ToySignature() {
  ModelSignature sig;
  using runtime::TensorSpec;
  sig.inputs = {TensorSpec{"input_ids", DType::kInt64, {-1, -1}},
                TensorSpec{"attention_mask", DType::kInt64, {-1, -1}},
                TensorSpec{"position_ids", DType::kInt64, {-1, -1}},
                TensorSpec{"past_key_values.0.key", DType::kFloat32, {-1, 1, -1, 2}}};
  sig.outputs = {TensorSpec{"logits", DType::kFloat32, {-1, -1, kVocab}},
                 TensorSpec{"present.0.key", DType::kFloat32, {-1, 1, -1, 2}}};
  sig.dim_symbols = {{"", "seq"}, {"", "past + seq"}, {"", "seq"}, {"", "", "past", ""}};
  sig.default_dims = {{"past", 1}, {"seq", 1}};
  sig.dim_ranges = {{"past", {1, 200}}, {"seq", {1, 16}}};
  return sig;
}

// The rule: after tokens t_0..t_{n-1}, the next is (sum_j t_j * (j + 1) + n - 1) mod vocab.
int64_t NextToken(const std::vector<int64_t>& tokens) {
  int64_t s = static_cast<int64_t>(tokens.size()) - 1;
  for (size_t j = 0; j < tokens.size(); ++j) s += tokens[j] * static_cast<int64_t>(j + 1);
  return s % kVocab;
}

std::vector<int64_t> Expected(std::vector<int64_t> prompt, int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(NextToken(prompt));
    prompt.push_back(out.back());
  }
  return out;
}

// The toy model as a step: present = past ++ (id, position) per new position; each new
// position's logits are one-hot at the rule applied to the positions its mask and the
// causal order let it see (weighting the j-th visible one by j + 1).
absl::StatusOr<std::vector<Tensor>> ToyStep(std::vector<Tensor> in, int64_t rows,
                                            std::vector<Tensor> = {}) {
  const Tensor &ids = in[0], &mask = in[1], &pos = in[2], &past = in[3];
  const int64_t c = ids.dim(1), P = past.dim(2);
  if (mask.dim(1) != P + c || ids.dim(0) != rows) return absl::InvalidArgumentError("shapes");
  std::vector<Tensor> out{Tensor(DType::kFloat32, {rows, c, kVocab}),
                          Tensor(DType::kFloat32, {rows, 1, P + c, 2})};
  for (int64_t b = 0; b < rows; ++b) {
    float* present = out[1].mutable_data<float>() + b * (P + c) * 2;
    std::copy_n(past.data<float>() + b * P * 2, P * 2, present);
    for (int64_t k = 0; k < c; ++k) {
      present[(P + k) * 2] = static_cast<float>(ids.GetInt(b * c + k));
      present[(P + k) * 2 + 1] = static_cast<float>(pos.GetInt(b * c + k));
    }
    for (int64_t k = 0; k < c; ++k) {
      int64_t s = pos.GetInt(b * c + k), j = 0;
      for (int64_t t = 0; t <= P + k; ++t) {
        if (mask.GetInt(b * (P + c) + t) == 0) continue;
        if (static_cast<int64_t>(present[t * 2 + 1]) != j) return absl::InternalError("order");
        s += static_cast<int64_t>(present[t * 2]) * ++j;
      }
      out[0].mutable_data<float>()[(b * c + k) * kVocab + s % kVocab] = 1.0f;
    }
  }
  return out;
}

struct ToyOptions {
  int64_t kv_bytes = 1 << 20;
  int64_t max_rows = 4, max_sequences = 16, prefill_chunk = 8, prefill_budget = 256;
  StepFn step = ToyStep;
};

std::unique_ptr<Generator> ToyGenerator(const ToyOptions& o = {}) {
  GeneratorSetup s;
  s.signature = ToySignature();
  auto contract = FindDecoderContract(s.signature);
  EXPECT_TRUE(contract.ok()) << contract.status();
  s.contract = *contract;
  s.config.kv_cache_bytes = o.kv_bytes;
  s.config.page_tokens = 4;
  s.config.prefill_chunk = o.prefill_chunk;
  s.config.prefill_budget = o.prefill_budget;
  s.config.max_sequences = o.max_sequences;
  s.config.eos_token_ids = {};
  s.max_rows = o.max_rows;
  s.min_step = 1;
  s.max_step = 16;
  s.max_context = 200;
  s.step = o.step;
  s.past_size = [](int64_t n) { return std::max<int64_t>(8, (n + 7) / 8 * 8); };  // classes of 8
  auto g = Generator::Create(std::move(s), std::make_shared<MemoryAccount>("test", 0, nullptr));
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::move(*g) : nullptr;
}

struct Outcome {
  std::vector<int64_t> tokens;
  StreamChunk end;
};

Outcome Drain(GenerationStream& s) {
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

GenerateParams Greedy(std::vector<int64_t> prompt, int64_t max_tokens) {
  GenerateParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = max_tokens;
  return p;
}

std::vector<int64_t> Prompt(int64_t n, int64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = (seed * 31 + i * 7) % kVocab;
  return p;
}

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
  ToyOptions o;
  // 2 floats x 4 bytes per position, 4 positions a page: 12 pages = 48 positions for six
  // sequences that each grow to 40.
  o.kv_bytes = 12 * 4 * 8;
  auto g = ToyGenerator(o);
  std::vector<std::shared_ptr<GenerationStream>> streams;
  for (int64_t i = 0; i < 6; ++i) {
    auto s = g->Submit(Greedy(Prompt(4 + i, i), 30));
    ASSERT_TRUE(s.ok()) << s.status();
    streams.push_back(*s);
  }
  for (int64_t i = 0; i < 6; ++i) {
    Outcome out = Drain(*streams[static_cast<size_t>(i)]);
    ASSERT_TRUE(out.end.status.ok()) << out.end.status;
    EXPECT_EQ(out.tokens, Expected(Prompt(4 + i, i), 30)) << "sequence " << i;
  }
  EXPECT_GT(g->stats().preemptions, 0);
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

// --- sampler ---

std::vector<float> Logits(std::initializer_list<float> v) { return v; }

TEST(Sampler, GreedyTakesTheLargestLogitAndTheLowestIdOnTies) {
  Sampler s(SamplingParams{});
  auto l = Logits({0.1f, 2.0f, -1.0f, 2.0f});
  Sampled x = s.Next(l.data(), 4, {});
  EXPECT_EQ(x.token, 1);
  double z = 0;
  for (float v : l) z += std::exp(static_cast<double>(v));
  EXPECT_NEAR(x.logprob, 2.0 - std::log(z), 1e-9);
}

TEST(Sampler, TopKAndTopPKeepOnlyTheirCandidates) {
  SamplingParams p;
  p.temperature = 5.0;  // nearly uniform: only the cut keeps the draw to the top tokens
  p.top_k = 2;
  p.seed = 1;
  Sampler k(p);
  auto l = Logits({3.0f, 1.0f, 2.9f, 0.0f, -1.0f});
  for (int i = 0; i < 200; ++i) {
    const int64_t t = k.Next(l.data(), 5, {}).token;
    EXPECT_TRUE(t == 0 || t == 2) << t;
  }
  p.top_k = 0;
  p.temperature = 1.0;
  p.top_p = 0.3;  // the first token alone holds more than 30 %
  Sampler tp(p);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(tp.Next(l.data(), 5, {}).token, 0);
  p.top_p = 1.0;
  Sampler all(p);
  std::set<int64_t> seen;
  for (int i = 0; i < 2000; ++i) seen.insert(all.Next(l.data(), 5, {}).token);
  EXPECT_EQ(seen.size(), 5u);  // the negative case: without the cuts every token appears
}

TEST(Sampler, PenaltiesFollowTheirDefinitions) {
  auto l = Logits({2.0f, 1.9f, -0.5f});
  SamplingParams rep;
  rep.repetition_penalty = 2.0;  // 2.0 -> 1.0: token 1 wins
  EXPECT_EQ(Sampler(rep).Next(l.data(), 3, {{0, 1}}).token, 1);
  EXPECT_EQ(Sampler(rep).Next(l.data(), 3, {}).token, 0);  // nothing seen: no change
  SamplingParams freq;
  freq.frequency_penalty = 0.06;  // 2.0 - 2 x 0.06 = 1.88 < 1.9
  EXPECT_EQ(Sampler(freq).Next(l.data(), 3, {{0, 2}}).token, 1);
  EXPECT_EQ(Sampler(freq).Next(l.data(), 3, {{0, 1}}).token, 0);  // 1.94 > 1.9
  SamplingParams pres;
  pres.presence_penalty = 0.2;
  EXPECT_EQ(Sampler(pres).Next(l.data(), 3, {{0, 1}}).token, 1);
  auto neg = Logits({-1.0f, -1.5f});
  EXPECT_EQ(Sampler(rep).Next(neg.data(), 2, {{0, 1}}).token, 1);  // -1 x 2 = -2 < -1.5
}

TEST(Sampler, ValidationNamesTheField) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_NE(ValidateSampling(p).message().find("temperature"), std::string::npos);
  p = {};
  p.top_k = -2;
  EXPECT_NE(ValidateSampling(p).message().find("top_k"), std::string::npos);
  p = {};
  p.repetition_penalty = 0;
  EXPECT_NE(ValidateSampling(p).message().find("repetition_penalty"), std::string::npos);
  EXPECT_TRUE(ValidateSampling(SamplingParams{}).ok());
}

// --- cache and contract ---

TEST(KvCache, GrowsWithinItsPagesAndRoundTripsPositions) {
  auto contract = FindDecoderContract(ToySignature());
  ASSERT_TRUE(contract.ok()) << contract.status();
  auto cache = KvCache::Create(*contract, 4, 5 * 4 * 8, std::make_shared<MemoryAccount>("t", 0, nullptr));
  ASSERT_TRUE(cache.ok()) << cache.status();
  KvCache& c = **cache;
  EXPECT_EQ(c.pages_total(), 5);
  PageTable a, b;
  ASSERT_TRUE(c.Grow(a, 9));  // 3 pages
  EXPECT_FALSE(c.Grow(b, 9));  // 2 left: refused, unchanged
  EXPECT_TRUE(b.pages.empty());
  ASSERT_TRUE(c.Grow(b, 8));
  EXPECT_EQ(c.pages_free(), 0);
  // present [1, 1, 9, 2] holding 0..17 -> a's positions 0..8 -> gathered back at past 12.
  Tensor present(DType::kFloat32, {1, 1, 9, 2});
  for (int i = 0; i < 18; ++i) present.mutable_data<float>()[i] = static_cast<float>(i);
  c.Scatter(0, present, 0, 0, 9, a, 0);
  Tensor past(DType::kFloat32, {2, 1, 12, 2});
  c.Gather(0, {&a, &b}, {9, 0}, past);
  for (int i = 0; i < 18; ++i) EXPECT_EQ(past.data<float>()[i], i);
  for (int i = 18; i < 48; ++i) EXPECT_EQ(past.data<float>()[i], 0.0f) << i;
  c.Release(a);
  c.Release(b);
  EXPECT_EQ(c.pages_free(), 5);
  EXPECT_FALSE(KvCache::Create(*contract, 4, 8, std::make_shared<MemoryAccount>("t", 0, nullptr)).ok());
  // A budget that refuses the bytes refuses the cache.
  auto tight = std::make_shared<MemoryAccount>("tight", 100, nullptr);
  EXPECT_EQ(KvCache::Create(*contract, 4, 5 * 4 * 8, tight).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(StepInputs, PadEachRowsPastWithZerosAndMaskItOut) {
  auto contract = FindDecoderContract(ToySignature());
  ASSERT_TRUE(contract.ok());
  auto cache = KvCache::Create(*contract, 4, 8 * 4 * 8, std::make_shared<MemoryAccount>("t", 0, nullptr));
  ASSERT_TRUE(cache.ok());
  // Every page filled with 7s first, so a gather past a row's length shows.
  PageTable all;
  ASSERT_TRUE((*cache)->Grow(all, 32));
  Tensor sevens(DType::kFloat32, {1, 1, 32, 2});
  for (int i = 0; i < 64; ++i) sevens.mutable_data<float>()[i] = 7.0f;
  (*cache)->Scatter(0, sevens, 0, 0, 32, all, 0);
  (*cache)->Release(all);
  PageTable a, b;
  ASSERT_TRUE((*cache)->Grow(a, 4) && (*cache)->Grow(b, 7));
  std::vector<int64_t> ta{1, 2, 3, 4}, tb{5, 6, 7, 8, 9, 10, 11};
  std::vector<StepRow> rows{{&ta, 3, &a}, {&tb, 6, &b}};
  std::vector<Tensor> in;
  ASSERT_TRUE(BuildStepInputs(*contract, ToySignature(), **cache, rows, 1, 8, in).ok());
  // Built twice into the same tensors (the second over the first's values): the same inputs.
  const void* buffer = in[3].raw();
  ASSERT_TRUE(BuildStepInputs(*contract, ToySignature(), **cache, rows, 1, 8, in).ok());
  EXPECT_EQ(in[3].raw(), buffer) << "a step of the same shape reuses its buffers";
  const Tensor& past = in[3];
  ASSERT_EQ(past.shape(), (std::vector<int64_t>{2, 1, 8, 2}));
  for (int64_t r = 0; r < 2; ++r) {
    const int64_t len = r == 0 ? 3 : 6;
    for (int64_t p = len; p < 8; ++p) {
      EXPECT_EQ(past.data<float>()[(r * 8 + p) * 2], 0.0f) << "row " << r << " position " << p;
    }
    for (int64_t p = 0; p < 9; ++p) {
      EXPECT_EQ(in[1].GetInt(r * 9 + p), p < len || p == 8 ? 1 : 0) << "mask " << r << "," << p;
    }
  }
  EXPECT_EQ(in[0].GetInt(0), 4);   // row 0 feeds its 4th token
  EXPECT_EQ(in[2].GetInt(0), 3);   // at position 3
  EXPECT_EQ(in[0].GetInt(1), 11);  // row 1 its 7th, at 6
  EXPECT_EQ(in[2].GetInt(1), 6);
  // A row whose cache is longer than the padded past is refused.
  std::vector<StepRow> bad{{&tb, 6, &b}};
  std::vector<Tensor> none;
  EXPECT_FALSE(BuildStepInputs(*contract, ToySignature(), **cache, bad, 1, 4, none).ok());
}

TEST(DecoderContract, FindsTheRolesAndSaysWhatIsMissing) {
  auto c = FindDecoderContract(ToySignature());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->past_symbol, "past");
  EXPECT_EQ(c->sequence_symbol, "seq");
  ASSERT_EQ(c->cache.size(), 1u);
  EXPECT_EQ(c->cache[0].axis, 2);
  EXPECT_EQ(c->cache[0].outer, 1);
  EXPECT_EQ(c->cache[0].inner, 2);
  EXPECT_EQ(c->vocab, kVocab);

  ModelSignature no_mask = ToySignature();
  no_mask.inputs[1].name = "token_type_ids";
  EXPECT_NE(FindDecoderContract(no_mask).status().message().find("attention_mask"),
            std::string::npos);
  ModelSignature no_present = ToySignature();
  no_present.outputs[1].name = "cache_out";
  EXPECT_NE(FindDecoderContract(no_present).status().message().find("present.0.key"),
            std::string::npos);
  ModelSignature fixed = ToySignature();
  fixed.default_dims.clear();
  EXPECT_FALSE(FindDecoderContract(fixed).ok());
  EXPECT_EQ(PresentNameFor("past_key_values.3.value"), "present.3.value");
  EXPECT_EQ(PresentNameFor("past_key_7"), "present_key_7");
  EXPECT_EQ(PresentNameFor("cache"), "");
}

}  // namespace
}  // namespace kiln::server::generate
