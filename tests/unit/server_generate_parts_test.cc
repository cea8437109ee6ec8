// The generation loop's pieces (server/generate/): the sampler's definitions, the paged
// cache, the step inputs and the decoder contract, on the toy decoder's signature.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "server/generate/decoder_contract.h"
#include "server/generate/kv_cache.h"
#include "server/generate/sampler.h"
#include "server/generate/step.h"
#include "tests/unit/generate_toy.h"

namespace kiln::server::generate {
namespace {

using namespace testing;  // NOLINT: the toy decoder

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
  // Not asked for: the same token, and no pass over the vocabulary for its log-probability.
  Sampled y = Sampler(SamplingParams{}, /*logprobs=*/false).Next(l.data(), 4, {});
  EXPECT_EQ(y.token, 1);
  EXPECT_EQ(y.logprob, 0.0);
}

// Greedy without log-probabilities or penalties takes the raw logits' largest; the same token
// as the path that computes them, ties (the lowest id) and NaN included.
TEST(Sampler, GreedyWithoutLogprobsPicksWhatTheFullPathPicks) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> level(0, 5);  // few values: many ties
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<float> l(37);
    for (float& v : l) v = static_cast<float>(level(rng)) - 2.5f;
    if (trial % 50 == 0) l[static_cast<size_t>(trial % 37)] = std::nanf("");
    const int64_t fast = Sampler(SamplingParams{}, false).Next(l.data(), 37, {}).token;
    const int64_t full = Sampler(SamplingParams{}, true).Next(l.data(), 37, {}).token;
    ASSERT_EQ(fast, full) << "trial " << trial;
  }
  // Negative: with a penalty and seen tokens the fast path is not taken, and the penalty counts.
  SamplingParams rep;
  rep.repetition_penalty = 2.0;
  auto l = Logits({2.0f, 1.9f});
  EXPECT_EQ(Sampler(rep, false).Next(l.data(), 2, {{0, 1}}).token, 1);
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

  EXPECT_TRUE(c->has_mask());
  // Without a mask the contract holds (the loop then runs at exact lengths); an input it
  // cannot place is still named.
  auto maskless = FindDecoderContract(MasklessToySignature());
  ASSERT_TRUE(maskless.ok()) << maskless.status();
  EXPECT_FALSE(maskless->has_mask());
  EXPECT_EQ(maskless->cache[0].input, 2u);
  ModelSignature extra = ToySignature();
  extra.inputs[1].name = "token_type_ids";
  EXPECT_NE(FindDecoderContract(extra).status().message().find("token_type_ids"),
            std::string::npos);
  ModelSignature no_present = ToySignature();
  no_present.outputs[1].name = "cache_out";
  EXPECT_NE(FindDecoderContract(no_present).status().message().find("present.0.key"),
            std::string::npos);
  ModelSignature fixed = ToySignature();
  fixed.default_dims.clear();
  EXPECT_FALSE(FindDecoderContract(fixed).ok());
  EXPECT_EQ(PresentNameFor("past_key_values.3.value"), "present.3.value");
  // A model without position ids derives them itself (the padding proof decides whether it
  // may be padded): the contract has none and the step feeds none.
  ModelSignature derived = ToySignature();
  derived.inputs.erase(derived.inputs.begin() + 2);
  derived.dim_symbols.erase(derived.dim_symbols.begin() + 2);
  auto d = FindDecoderContract(derived);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->has_positions());
  EXPECT_EQ(d->cache[0].input, 2u);
  EXPECT_TRUE(c->has_positions());
  auto cache = KvCache::Create(*d, 4, 4 * 4 * 8, std::make_shared<MemoryAccount>("t", 0, nullptr));
  ASSERT_TRUE(cache.ok());
  PageTable t;
  ASSERT_TRUE((*cache)->Grow(t, 3));
  std::vector<int64_t> tokens{1, 2, 3};
  std::vector<Tensor> in;
  ASSERT_TRUE(BuildStepInputs(*d, derived, **cache, {{&tokens, 2, &t}}, 1, 4, in).ok());
  ASSERT_EQ(in.size(), 3u);
  EXPECT_EQ(in[0].GetInt(0), 3);
  EXPECT_EQ(in[1].shape(), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(in[2].shape(), (std::vector<int64_t>{1, 1, 4, 2}));
  // A position_ids input that is no [batch, positions] int tensor is still refused.
  ModelSignature bad_positions = ToySignature();
  bad_positions.inputs[2].dtype = DType::kFloat32;
  EXPECT_NE(FindDecoderContract(bad_positions).status().message().find("position_ids"),
            std::string::npos);
  EXPECT_EQ(PresentNameFor("past_key_7"), "present_key_7");
  EXPECT_EQ(PresentNameFor("cache"), "");
}

// Another exporter's names, given in generation.tensors: the same roles found; a name the
// model lacks is refused naming it.
TEST(DecoderContract, TakesTheRolesNamesFromTheConfig) {
  ModelSignature sig = ToySignature();
  sig.inputs[0].name = "tokens";
  sig.inputs[1].name = "mask";
  sig.inputs[2].name = "pos";
  sig.inputs[3].name = "k_cache_0";
  sig.outputs[0].name = "scores";
  sig.outputs[1].name = "k_cache_out_0";
  EXPECT_FALSE(FindDecoderContract(sig).ok());
  DecoderTensorNames names;
  names.input_ids = "tokens";
  names.attention_mask = "mask";
  names.position_ids = "pos";
  names.logits = "scores";
  names.cache = {{"k_cache_0", "k_cache_out_0"}};
  auto c = FindDecoderContract(sig, names);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->input_ids, 0u);
  EXPECT_EQ(c->attention_mask, 1u);
  EXPECT_EQ(c->position_ids, 2u);
  EXPECT_EQ(c->logits, 0u);
  ASSERT_EQ(c->cache.size(), 1u);
  EXPECT_EQ(c->cache[0].present_name, "k_cache_out_0");
  EXPECT_EQ(c->cache[0].output, 1u);
  DecoderTensorNames wrong = names;
  wrong.cache = {{"v_cache_0", "v_cache_out_0"}};
  EXPECT_NE(FindDecoderContract(sig, wrong).status().message().find("'v_cache_0'"),
            std::string::npos);
  wrong = names;
  wrong.logits = "logits";
  EXPECT_NE(FindDecoderContract(sig, wrong).status().message().find("no output 'logits'"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::server::generate
