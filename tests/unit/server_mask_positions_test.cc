// Positions read from a decoder's own attention mask where it counts them from its cache's
// length (server/model/mask_positions.h): each row's or the first row's, what a client's mask
// then computes, what is refused and what is left alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "server/model/cache_mask.h"
#include "server/model/mask_positions.h"
#include "tests/unit/cache_mask_test_util.h"

namespace kiln::server {
namespace {

using cache_mask_test::At;
using cache_mask_test::Config;
using cache_mask_test::Decoder;
using cache_mask_test::ExpectPaddedRowsMatch;
using cache_mask_test::Form;
using cache_mask_test::kHidden;
using cache_mask_test::Ones;
using cache_mask_test::Random;

// Logits of `g` at 2 rows, a cache of 4 and 2 new positions, under `mask`.
Tensor LogitsUnder(const Graph& g, const Tensor& mask) {
  std::unique_ptr<Graph> at = At(g, 2, 4, 2);
  auto got = ref::Run(*at, {{"input_ids", Tensor::FromInt64({1, 2, 3, 4}, {2, 2})},
                            {"past_key_values.0.key", Random({2, 1, 4, kHidden}, 7)},
                            {"attention_mask", mask}});
  EXPECT_TRUE(got.ok()) << got.status();
  return got.ok() ? got->at("logits") : Tensor();
}

TEST(MaskPositions, PositionsCountedFromTheCacheStartAtTheMasksExtent) {
  std::unique_ptr<Graph> original = Decoder({.own_mask = true});
  Graph g = std::move(*Decoder({.own_mask = true}));
  absl::StatusOr<CacheMaskOutcome> out = AddCacheMask(g, Config());
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->positions_from_mask) << out->refused;
  EXPECT_FALSE(out->added());
  EXPECT_TRUE(out->reported());
  EXPECT_EQ(out->mask, "attention_mask");
  EXPECT_TRUE(out->rows_share_length);
  EXPECT_EQ(out->past_symbol, "past_sequence_length");
  EXPECT_NE(out->ToString().find("positions read from 'attention_mask'"), std::string::npos);
  EXPECT_EQ(g.inputs.size(), 3u);
  EXPECT_TRUE(IsStatic(*At(g, 2, 6, 3)->FindValue("logits")->shape));
  ExpectPaddedRowsMatch(*original, g, {4, 4}, 9);
  ExpectPaddedRowsMatch(*original, g, {0}, 3);  // a prompt's first step: an empty cache
  ExpectPaddedRowsMatch(*original, g, {5}, 5);  // unpadded
}

TEST(MaskPositions, PositionsReadAsRowsStartAtEachRowsExtent) {
  std::unique_ptr<Graph> original = Decoder({.own_mask = true, .unsqueezed = true});
  Graph g = std::move(*Decoder({.own_mask = true, .unsqueezed = true}));
  absl::StatusOr<CacheMaskOutcome> out = AddCacheMask(g, Config());
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->positions_from_mask) << out->refused;
  EXPECT_TRUE(out->per_row);
  EXPECT_FALSE(out->rows_share_length);
  ExpectPaddedRowsMatch(*original, g, {0, 3, 7}, 8);
  ExpectPaddedRowsMatch(*original, g, {5}, 5);
}

TEST(MaskPositions, ACausalMaskPlacedByTheSameRangeKeepsThePaddedPositions) {
  // As transformers' cache_position: the Range makes the positions [1, n] and places the
  // causal mask. Read per row, the positions are each row's; the causal mask keeps the padded
  // layout's (query i at the padded cache's end plus i), with its mask of its own or an added
  // one.
  for (const bool own_mask : {true, false}) {
    SCOPED_TRACE(own_mask ? "own mask" : "added mask");
    const Form f{.own_mask = own_mask, .causal = true, .unsqueezed = true};
    std::unique_ptr<Graph> original = Decoder(f);
    Graph g = std::move(*Decoder(f));
    absl::StatusOr<CacheMaskOutcome> out = AddCacheMask(g, Config());
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_TRUE(out->per_row) << out->refused;
    EXPECT_EQ(out->positions_from_mask, own_mask);
    ExpectPaddedRowsMatch(*original, g, {0, 3, 7}, 8);
    ExpectPaddedRowsMatch(*original, g, {5}, 5);
  }
}

TEST(MaskPositions, AClientMaskGivesTheExportsPositionsWhileARowHoldsItsLastCachedPosition) {
  std::unique_ptr<Graph> original = Decoder({.own_mask = true});
  Graph g = std::move(*Decoder({.own_mask = true}));
  ASSERT_TRUE(AddCacheMask(g, Config())->positions_from_mask);
  // Read per row: every row padded on the left gives the export's logits.
  std::unique_ptr<Graph> rows_original = Decoder({.own_mask = true, .unsqueezed = true});
  Graph rows = std::move(*Decoder({.own_mask = true, .unsqueezed = true}));
  ASSERT_TRUE(AddCacheMask(rows, Config())->per_row);
  Tensor left = Ones(2, 6);
  for (int64_t i : {0, 1, 6}) left.SetInt(i, 0);
  ASSERT_TRUE(CheckLastCachedReal(left, 4, /*every_row=*/true).ok());
  const Tensor want_rows = LogitsUnder(*rows_original, left), got_rows = LogitsUnder(rows, left);
  for (int64_t i = 0; i < want_rows.numel(); ++i) {
    EXPECT_NEAR(got_rows.GetDouble(i), want_rows.GetDouble(i), 1e-5);
  }
  Tensor mask = Ones(2, 6);  // [rows, past 4 + new 2]
  mask.SetInt(0, 0);         // row 0 padded on the left
  mask.SetInt(1, 0);
  mask.SetInt(6 + 3, 0);  // row 1 hides its last cached position; row 0 holds it
  ASSERT_TRUE(CheckLastCachedReal(mask, 4, /*every_row=*/false).ok());
  EXPECT_NE(CheckLastCachedReal(mask, 4, /*every_row=*/true).message().find("row 1 hides"),
            std::string::npos);
  Tensor want = LogitsUnder(*original, mask), got = LogitsUnder(g, mask);
  ASSERT_EQ(got.numel(), want.numel());
  for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got.GetDouble(i), want.GetDouble(i), 1e-5);
  // Row 0 hides it: the extent is shorter than the cache and the positions move, so a request
  // so is refused.
  mask.SetInt(3, 0);
  mask.SetInt(6 + 3, 1);
  want = LogitsUnder(*original, mask);
  got = LogitsUnder(g, mask);
  double most = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    most = std::max(most, std::abs(got.GetDouble(i) - want.GetDouble(i)));
  }
  EXPECT_GT(most, 1e-3);
  absl::Status s = CheckLastCachedReal(mask, 4, /*every_row=*/false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("row 0 hides its last cached position (column 3)"), std::string::npos)
      << s;
  EXPECT_TRUE(CheckLastCachedReal(mask, 0, true).ok());   // an empty cache
  EXPECT_FALSE(CheckLastCachedReal(mask, 7, true).ok());  // past beyond the mask
}

TEST(MaskPositions, ARangeThatAlsoPlacesTheCausalMaskIsRefusedAndTheModelKept) {
  // Read from the mask, query i would sit at extent + i while its own key sits at the padded
  // cache's end: the causal mask would hide it, and the proof sees the logits move.
  Graph g = std::move(*Decoder({.own_mask = true, .causal = true}));
  const size_t nodes = g.nodes().size();
  absl::StatusOr<CacheMaskOutcome> out = AddCacheMask(g, Config());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(out->positions_from_mask);
  EXPECT_FALSE(out->rows_share_length);
  EXPECT_NE(out->refused.find("positions read from the attention mask do not reproduce"),
            std::string::npos)
      << out->refused;
  EXPECT_NE(out->ToString().find("exact cache lengths"), std::string::npos);
  EXPECT_EQ(g.nodes().size(), nodes);
  EXPECT_EQ(g.inputs.size(), 3u);
}

TEST(MaskPositions, NothingForAModelThatPadsAsItIsTakesPositionsOrHasTheRewriteOff) {
  ModelConfig off = Config();
  off.generation.cache_mask = "off";
  const std::vector<std::pair<Form, ModelConfig>> cases{
      // The Range places only the causal mask, which pads as it is: rows of any length.
      {{.own_mask = true, .causal = true, .no_position_term = true}, Config()},
      {{.positions_from_past = false, .own_mask = true}, Config()},
      {{.own_mask = true}, off}};
  for (const auto& [form, config] : cases) {
    Graph g = std::move(*Decoder(form));
    const size_t nodes = g.nodes().size();
    absl::StatusOr<CacheMaskOutcome> out = AddCacheMask(g, config);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_FALSE(out->reported()) << out->ToString();
    EXPECT_EQ(g.nodes().size(), nodes);
  }
}

}  // namespace
}  // namespace kiln::server
