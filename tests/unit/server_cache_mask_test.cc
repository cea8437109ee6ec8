// An attention mask added to a decoder exported without one (server/model/cache_mask.h): the
// rewrite, its proof and what it refuses; Range's length when its limit is its start plus a
// constant (compiler/shape/rules_indexing.cc); and a request that leaves the added mask out
// (server/serving/request_validation.h).
#include <gtest/gtest.h>

#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "server/model/cache_mask.h"
#include "server/serving/request_validation.h"
#include "tests/unit/cache_mask_test_util.h"

namespace kiln::server {
namespace {

using cache_mask_test::At;
using cache_mask_test::Config;
using cache_mask_test::Decoder;
using cache_mask_test::ExpectPaddedRowsMatch;
using cache_mask_test::Form;

TEST(CacheMask, PositionsFromTheCacheLengthReadItFromTheMaskAndRowsShareIt) {
  std::unique_ptr<Graph> original = Decoder({});
  Graph g = std::move(*Decoder({}));
  absl::StatusOr<CacheMaskOutcome> out = AddCacheMask(g, Config());
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->added()) << out->refused;
  EXPECT_EQ(out->input, "attention_mask");
  EXPECT_TRUE(out->rows_share_length);
  EXPECT_NE(out->ToString().find("rows of one cache length per step"), std::string::npos);
  ASSERT_EQ(g.inputs.size(), 3u);
  EXPECT_EQ(g.inputs.back()->name, "attention_mask");
  EXPECT_EQ((*g.inputs.back()->shape)[1].param, "past_sequence_length + sequence");
  // The positions' count stays static though their start is read at run time.
  std::unique_ptr<Graph> at = At(g, 2, 6, 3);
  EXPECT_TRUE(IsStatic(*at->FindValue("logits")->shape));
  ExpectPaddedRowsMatch(*original, g, {4, 4}, 9);
  ExpectPaddedRowsMatch(*original, g, {0}, 3);  // a prompt's first step: an empty cache
}

TEST(CacheMask, PositionsReadAsRowsAreCountedPerRowAndRowsOfAnyLengthShareAStep) {
  // arange(past, past + sequence).unsqueeze(0): each row's count of real cached positions
  // starts its own, [rows, sequence], as a position_ids input would be.
  std::unique_ptr<Graph> original = Decoder({.unsqueezed = true});
  Graph g = std::move(*Decoder({.unsqueezed = true}));
  absl::StatusOr<CacheMaskOutcome> out = AddCacheMask(g, Config());
  ASSERT_TRUE(out.ok() && out->added()) << out->refused;
  EXPECT_TRUE(out->per_row);
  EXPECT_FALSE(out->rows_share_length);
  EXPECT_NE(out->ToString().find("each row's positions from its own mask row"), std::string::npos)
      << out->ToString();
  EXPECT_TRUE(IsStatic(*At(g, 3, 6, 2)->FindValue("logits")->shape));
  ExpectPaddedRowsMatch(*original, g, {0, 3, 7}, 8);
  ExpectPaddedRowsMatch(*original, g, {5}, 5);
}

TEST(CacheMask, FedPositionsLetRowsOfAnyLengthShareAStep) {
  std::unique_ptr<Graph> original = Decoder({.positions_from_past = false});
  Graph g = std::move(*Decoder({.positions_from_past = false}));
  absl::StatusOr<CacheMaskOutcome> out = AddCacheMask(g, Config());
  ASSERT_TRUE(out.ok() && out->added()) << out->refused;
  EXPECT_FALSE(out->rows_share_length);
  ExpectPaddedRowsMatch(*original, g, {0, 3, 7}, 8);
}

TEST(CacheMask, TheUnpaddedModelIsUnchangedWithAMaskOfOnes) {
  std::unique_ptr<Graph> original = Decoder({});
  Graph g = std::move(*Decoder({}));
  ASSERT_TRUE(AddCacheMask(g, Config())->added());
  ExpectPaddedRowsMatch(*original, g, {5}, 5);
}

// What is refused leaves the graph as it was, saying why.
void ExpectRefused(const Form& f, const ModelConfig& config, const std::string& why) {
  Graph g = std::move(*Decoder(f));
  const size_t nodes = g.nodes().size();
  absl::StatusOr<CacheMaskOutcome> out = AddCacheMask(g, config);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(out->added());
  EXPECT_NE(out->refused.find(why), std::string::npos) << out->refused;
  EXPECT_NE(out->ToString().find("exact cache lengths"), std::string::npos);
  EXPECT_EQ(g.inputs.size(), f.positions_from_past ? 2u : 3u);
  EXPECT_EQ(g.nodes().size(), nodes);
}

TEST(CacheMask, ASoftmaxWhoseFirstDimIsNotTheBatchIsNotMasked) {
  ExpectRefused({.heads_first = true}, Config(), "no Softmax over the cache's positions");
}

TEST(CacheMask, AModelThatReadsEveryCachedKeyOutsideItsSoftmaxIsRefusedByTheProof) {
  // The padding's zeros move the mean: neither form reproduces the model.
  ExpectRefused({.mean_over_keys = true}, Config(), "does not reproduce the model");
}

TEST(CacheMask, ALengthThatLeavesSizesKnownOnlyAtRunTimeIsRefused) {
  // Position rows sliced at [past, past + sequence): read from the mask, the slice's size is
  // known only when it runs, which would cost the engine its static plan.
  ExpectRefused({.sliced_positions = true}, Config(), "known only at run time");
}

TEST(CacheMask, RowsOfARequestMustShareTheirCacheLength) {
  Tensor mask(DType::kInt64, {2, 6});  // past 4: rows with 3 and 3 real, then 2 and 3
  for (int64_t i : {0, 1, 2, 4, 6, 7, 8, 10}) mask.SetInt(i, 1);
  EXPECT_TRUE(CheckRowsShareLength(mask, 4).ok());
  mask.SetInt(8, 0);
  absl::Status s = CheckRowsShareLength(mask, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("row 1 has 2 cached positions and row 0 has 3"), std::string::npos)
      << s;
  EXPECT_FALSE(CheckRowsShareLength(mask, 7).ok());  // past beyond the mask
}

TEST(CacheMask, OffInTheConfigKeepsTheExport) {
  ModelConfig off = Config();
  off.generation.cache_mask = "off";
  ExpectRefused({}, off, "generation.cache_mask is off");
}

TEST(CacheMask, NothingForAModelWithAMaskOrWithGenerationOff) {
  ModelConfig off = Config();
  off.generation.mode = "off";
  Graph g = std::move(*Decoder({}));
  absl::StatusOr<CacheMaskOutcome> out = AddCacheMask(g, off);
  ASSERT_TRUE(out.ok());
  EXPECT_FALSE(out->added());
  EXPECT_TRUE(out->refused.empty());
  // Once masked, a second pass finds the mask and adds nothing.
  ASSERT_TRUE(AddCacheMask(g, Config())->added());
  absl::StatusOr<CacheMaskOutcome> again = AddCacheMask(g, Config());
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->added());
  EXPECT_TRUE(again->refused.empty());
  EXPECT_NE(CacheMaskKey(Config()), CacheMaskKey(off));
}
// Range(s, s + k, d) has ceil(k / d) elements whatever s is; other limits stay unknown.
TEST(RangeShape, ALimitOfStartPlusAConstantGivesAStaticLength) {
  auto length = [](bool same_start, DType dtype, double step) -> std::optional<Shape> {
    GraphBuilder b;
    Value* s = b.Input("s", dtype, Shape{});
    Value* t = b.Input("t", dtype, Shape{});
    Value* k = b.Constant("k", Tensor::Scalar(dtype, 5));
    Value* r = b.Op("Range", {s, b.Op("Add", {same_start ? s : t, k}),
                              b.Constant("d", Tensor::Scalar(dtype, step))});
    b.Output(r);
    std::unique_ptr<Graph> g = b.Build();
    EXPECT_TRUE(shape::InferShapes(*g).ok());
    return g->outputs[0]->shape;
  };
  EXPECT_EQ(length(true, DType::kInt64, 1), (Shape{5}));
  EXPECT_EQ(length(true, DType::kInt32, 2), (Shape{3}));
  EXPECT_EQ(length(true, DType::kInt64, -1), (Shape{0}));
  EXPECT_FALSE(IsStatic(*length(false, DType::kInt64, 1)));   // another start
  EXPECT_FALSE(IsStatic(*length(true, DType::kFloat32, 1)));  // float: s + k - s may not be k
}

// A request written for the export leaves the added mask out: ones of [rows, past + sequence].
TEST(CacheMaskRequest, TheAddedMaskIsOnesWhenLeftOut) {
  ModelSignature sig;
  sig.inputs = {{"input_ids", DType::kInt64, {-1, -1}},
                {"past", DType::kFloat32, {-1, 2, -1, 4}},
                {"attention_mask", DType::kInt64, {-1, -1}}};
  sig.dim_symbols = {{"", "sequence"}, {"", "", "past", ""}, {"", "past + sequence"}};
  sig.default_dims = {{"past", 1}, {"sequence", 1}};
  sig.dim_ranges = {{"past", {0, 64}}, {"sequence", {1, 8}}};
  sig.max_batch_size = 4;
  std::vector<NamedTensor> in{{"input_ids", Tensor(DType::kInt64, {3, 2})},
                              {"past", Tensor(DType::kFloat32, {3, 2, 5, 4})}};
  EXPECT_EQ(ValidateNamedInputs(sig, in).status().code(), absl::StatusCode::kInvalidArgument)
      << "not added by the server: still required";
  sig.ones_when_absent.insert("attention_mask");
  absl::StatusOr<ValidatedInputs> v = ValidateNamedInputs(sig, in);
  ASSERT_TRUE(v.ok()) << v.status();
  const Tensor& mask = v->tensors[2];
  EXPECT_EQ(mask.shape(), (std::vector<int64_t>{3, 7}));
  for (int64_t i = 0; i < mask.numel(); ++i) ASSERT_EQ(mask.GetInt(i), 1);
  EXPECT_EQ(v->dims.at("past"), 5);
  // Given, it is the request's own; another input left out is still refused.
  in.push_back({"attention_mask", Tensor(DType::kInt64, {3, 7})});
  v = ValidateNamedInputs(sig, in);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->tensors[2].GetInt(0), 0);
  in.erase(in.begin());
  absl::Status s = ValidateNamedInputs(sig, in).status();
  EXPECT_NE(s.message().find("missing input 'input_ids'"), std::string::npos) << s;
  // The ones are sized only by inputs already checked: a past of 2^40 carried by a zero dim (a
  // tensor with one needs no bytes) is refused by its spec before anything is allocated, with
  // the zero in the batch or in a fixed dim; a sequence of 9 (the range is [1, 8]), by the range.
  for (const std::vector<int64_t>& past : {std::vector<int64_t>{0, 2, int64_t{1} << 40, 4},
                                           std::vector<int64_t>{3, 0, int64_t{1} << 40, 4}}) {
    std::vector<NamedTensor> huge{{"input_ids", Tensor(DType::kInt64, {past[0], 2})},
                                  {"past", Tensor(DType::kFloat32, past)}};
    s = ValidateNamedInputs(sig, huge).status();
    EXPECT_NE(s.message().find("the model takes"), std::string::npos) << s;
  }
  std::vector<NamedTensor> long_ids{{"input_ids", Tensor(DType::kInt64, {3, 9})},
                                    {"past", Tensor(DType::kFloat32, {3, 2, 5, 4})}};
  s = ValidateNamedInputs(sig, long_ids).status();
  EXPECT_NE(s.message().find("outside the sizes the model serves"), std::string::npos) << s;
  std::vector<NamedTensor> rows{{"input_ids", Tensor(DType::kInt64, {9, 2})},
                                {"past", Tensor(DType::kFloat32, {9, 2, 5, 4})}};
  s = ValidateNamedInputs(sig, rows).status();
  EXPECT_NE(s.message().find("batch of 9 exceeds max_batch_size 4"), std::string::npos) << s;
}

}  // namespace
}  // namespace kiln::server
