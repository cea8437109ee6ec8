// Prefix sharing in the generation loop's kv cache (server/generate/kv_cache.h): whole pages
// registered under their tokens' chain hash, shared by a later sequence that starts the same
// way, kept cached when nobody holds them and evicted only when their pages are needed; and
// the toy decoder's scheduler reading shared prompts (and a previous answer, as a chat's next
// turn does) from those pages, every token still the toy's rule.
#include <gtest/gtest.h>

#include "server/generate/kv_cache.h"
#include "tests/unit/generate_toy.h"
#include "tests/unit/generate_toy_loop.h"

namespace kiln::server::generate {
namespace {

using namespace testing;  // NOLINT: the toy decoder

// Pages of 4 positions of the toy's one cache tensor (8 bytes a position), `pages` of them.
std::unique_ptr<KvCache> Cache(int64_t pages) {
  auto contract = FindDecoderContract(ToySignature());
  EXPECT_TRUE(contract.ok());
  auto c = KvCache::Create(*contract, 4, pages * 4 * 8,
                           std::make_shared<MemoryAccount>("t", 0, nullptr));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

TEST(PrefixSharing, WholeComputedPagesAreSharedAndKeptUntilNeeded) {
  std::unique_ptr<KvCache> c = Cache(10);
  const std::vector<int64_t> tokens = Prompt(10, 1);
  PageTable a;
  ASSERT_TRUE(c->Grow(a, 10));  // 3 pages, the last one partial
  c->Register(tokens, 10, a);
  EXPECT_EQ(a.registered, 2);
  PageTable b;
  EXPECT_EQ(c->SharePrefix(tokens, 9, b), 8);
  EXPECT_EQ(b.pages, std::vector<int32_t>(a.pages.begin(), a.pages.begin() + 2));
  PageTable shorter, other, moved;
  EXPECT_EQ(c->SharePrefix(tokens, 7, shorter), 4) << "only pages wholly below the limit";
  std::vector<int64_t> changed = tokens;
  changed[1] += 1;  // the first page differs: nothing is shared, the second page neither
  EXPECT_EQ(c->SharePrefix(changed, 9, other), 0);
  changed = tokens;
  changed[0] += 1;
  changed[5] = tokens[5];
  EXPECT_EQ(c->SharePrefix(changed, 9, moved), 0) << "a page is found by all tokens before it";
  c->Release(shorter);
  // a's partial page is free at once; its registered pages b still holds.
  c->Release(a);
  EXPECT_EQ(c->pages_free(), 8);
  EXPECT_EQ(c->pages_cached(), 0);
  c->Release(b);
  EXPECT_EQ(c->pages_free(), 10);
  EXPECT_EQ(c->pages_cached(), 2);
  PageTable again;
  EXPECT_EQ(c->SharePrefix(tokens, 9, again), 8) << "kept while nobody needed the pages";
  EXPECT_EQ(c->pages_cached(), 0);
  c->Release(again);
  // Every page taken: the free ones first, then the cached ones, whose registrations go.
  PageTable all;
  ASSERT_TRUE(c->Grow(all, 40));
  EXPECT_FALSE(c->Grow(all, 41));
  c->Release(all);
  PageTable gone;
  EXPECT_EQ(c->SharePrefix(tokens, 9, gone), 0) << "evicted pages are not shared";
  EXPECT_EQ(c->pages_free(), 10);
}

// The toy's tokens after `prompt`, and the prompt positions the loop took from shared pages.
struct Generated {
  std::vector<int64_t> tokens;
  int64_t shared = 0;
};

Generated Generate(Generator& g, const std::vector<int64_t>& prompt, int64_t n) {
  const int64_t before = g.stats().prefix_tokens;
  auto s = g.Submit(Greedy(prompt, n));
  EXPECT_TRUE(s.ok()) << s.status();
  Outcome o = Drain(**s);
  EXPECT_TRUE(o.end.status.ok()) << o.end.status;
  return {o.tokens, g.stats().prefix_tokens - before};
}

TEST(PrefixSharing, PromptsThatStartAlikeReadTheSharedPagesAndStayRight) {
  for (bool appending : {false, true}) {
    SCOPED_TRACE(appending ? "appending" : "copying");
    ToyOptions o;
    o.appending = appending;
    auto g = ToyGenerator(o);
    const std::vector<int64_t> prompt = Prompt(37, 3);
    const Generated first = Generate(*g, prompt, 10);
    EXPECT_EQ(first.tokens, Expected(prompt, 10));
    EXPECT_EQ(first.shared, 0);
    // The same prompt: every whole page before its last token (36 positions) is shared.
    const Generated same = Generate(*g, prompt, 10);
    EXPECT_EQ(same.tokens, first.tokens);
    EXPECT_EQ(same.shared, 36);
    // Its first 20 tokens, then others: 5 pages.
    std::vector<int64_t> fork(prompt.begin(), prompt.begin() + 20);
    for (int64_t t : Prompt(9, 8)) fork.push_back(t);
    const Generated forked = Generate(*g, fork, 12);
    EXPECT_EQ(forked.tokens, Expected(fork, 12));
    EXPECT_EQ(forked.shared, 20);
    // A chat's next turn: the prompt, the answer, and more. The answer's pages were
    // registered as they were computed (46 positions: 11 whole pages).
    std::vector<int64_t> turn = prompt;
    turn.insert(turn.end(), first.tokens.begin(), first.tokens.end());
    for (int64_t t : Prompt(3, 9)) turn.push_back(t);
    const Generated next = Generate(*g, turn, 8);
    EXPECT_EQ(next.tokens, Expected(turn, 8));
    EXPECT_EQ(next.shared, 44);
    const GeneratorStats st = g->stats();
    EXPECT_EQ(st.pages_free, st.pages_total);
    EXPECT_GT(st.pages_cached, 0);
  }
}

TEST(PrefixSharing, PromptsThatArriveTogetherWaitForTheFirstOnesPages) {
  // A prefill of 8 tokens per iteration: the first prompt's 37 tokens take five iterations,
  // during which the other three would each compute the same pages.
  ToyOptions o;
  o.prefill_budget = 8;
  auto g = ToyGenerator(o);
  const std::vector<int64_t> prompt = Prompt(37, 6);
  std::vector<std::shared_ptr<GenerationStream>> streams;
  for (int i = 0; i < 4; ++i) {
    auto s = g->Submit(Greedy(prompt, 6));
    ASSERT_TRUE(s.ok()) << s.status();
    streams.push_back(*s);
  }
  for (auto& s : streams) {
    Outcome out = Drain(*s);
    ASSERT_TRUE(out.end.status.ok()) << out.end.status;
    EXPECT_EQ(out.tokens, Expected(prompt, 6));
  }
  EXPECT_EQ(g->stats().prefix_tokens, 3 * 36) << "each later prompt read the first one's pages";
}

TEST(PrefixSharing, ASmallCacheEvictsCachedPagesAndOffSharesNothing) {
  ToyOptions o;
  o.kv_bytes = 16 * 4 * 8;  // 16 pages of 4 positions
  auto g = ToyGenerator(o);
  const std::vector<int64_t> a = Prompt(30, 4), b = Prompt(40, 5);
  EXPECT_EQ(Generate(*g, a, 10).tokens, Expected(a, 10));
  // b needs 13 of the 16 pages: most of a's cached pages go.
  EXPECT_EQ(Generate(*g, b, 10).tokens, Expected(b, 10));
  const Generated again = Generate(*g, a, 10);
  EXPECT_EQ(again.tokens, Expected(a, 10));
  EXPECT_LT(again.shared, 28);
  EXPECT_EQ(g->stats().pages_free, g->stats().pages_total);

  o.prefix_cache = false;
  auto off = ToyGenerator(o);
  EXPECT_EQ(Generate(*off, a, 5).tokens, Expected(a, 5));
  const Generated plain = Generate(*off, a, 5);
  EXPECT_EQ(plain.tokens, Expected(a, 5));
  EXPECT_EQ(plain.shared, 0);
  EXPECT_EQ(off->stats().pages_cached, 0);
}

}  // namespace
}  // namespace kiln::server::generate
