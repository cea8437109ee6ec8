// fold_channel_shuffle tests: the shuffle, slices and gathers it folds (structure) compute the
// same as before (the reference interpreter on both graphs), and the chains it must leave.
#include "compiler/passes/fold_channel_shuffle.h"

#include <gtest/gtest.h>

#include "ir/builder.h"
#include "tests/unit/pass_test_util.h"
#include "tests/unit/test_tensors.h"

namespace kiln::passes {
namespace {

using testing::CountOps;
using testing::SineRamp;

Value* Shape(GraphBuilder& b, const std::vector<int64_t>& dims) {
  return b.Constant("shape", Tensor::FromInt64(dims, {static_cast<int64_t>(dims.size())}));
}

Value* Ints(GraphBuilder& b, const std::vector<int64_t>& v) {
  return b.Constant("ints", Tensor::FromInt64(v, {static_cast<int64_t>(v.size())}));
}

// x [2, 12, 3, 2] -> Reshape [2, g, 12/g, 3, 2] -> Transpose `perm` -> Reshape [2, 12, 3, 2].
Value* Shuffle(GraphBuilder& b, Value* x, int64_t g, std::vector<int64_t> perm = {0, 2, 1, 3, 4}) {
  Value* r = b.Op("Reshape", {x, Shape(b, {2, g, 12 / g, 3, 2})});
  Value* t = b.Op("Transpose", {r}, {{"perm", Attribute::Ints(perm)}});
  return b.Op("Reshape", {t, Shape(b, {2, 12, 3, 2})});
}

const ref::TensorMap kFeed = {{"x", SineRamp({2, 12, 3, 2}, 0.31, 0.2)}};

TEST(FoldChannelShuffle, AShuffleBecomesOneGather) {
  for (int64_t g : {2, 3, 4}) {
    SCOPED_TRACE(g);
    GraphBuilder b;
    Value* x = b.Input("x", DType::kFloat32, {2, 12, 3, 2});
    b.Output(Shuffle(b, x, g));
    auto graph = b.Build();
    EXPECT_TRUE(testing::RunPassAndCompare(*graph, FoldChannelShuffle, kFeed));
    EXPECT_EQ(CountOps(*graph, "Gather"), 1);
    EXPECT_EQ(CountOps(*graph, "Transpose") + CountOps(*graph, "Reshape"), 0);
  }
}

// ShuffleNet v2's block end: Concat -> shuffle -> the two halves (Slice along the channels,
// one with negative bounds and one with a step), each a Gather from the Concat.
TEST(FoldChannelShuffle, SlicesOfTheShuffleGatherFromItsSource) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 12, 3, 2});
  Value* s = Shuffle(b, x, 2);
  b.Output(b.Op("Slice", {s, Ints(b, {0}), Ints(b, {6}), Ints(b, {1})}));
  b.Output(b.Op("Slice", {s, Ints(b, {-6}), Ints(b, {INT64_MAX}), Ints(b, {-3})}));
  b.Output(b.Op("Slice", {s, Ints(b, {11}), Ints(b, {0}), Ints(b, {1}), Ints(b, {-2})}));
  auto graph = b.Build();
  EXPECT_TRUE(testing::RunPassAndCompare(*graph, FoldChannelShuffle, kFeed));
  EXPECT_EQ(CountOps(*graph, "Slice"), 0);
  EXPECT_EQ(CountOps(*graph, "Gather"), 3);  // the shuffle's own Gather has no reader left
  for (const auto& n : graph->nodes()) EXPECT_EQ(n->input(0)->name, "x");
}

// The halves taken by a Split instead (other exporters' chunk), unequal parts too.
TEST(FoldChannelShuffle, ASplitOfTheShuffleBecomesOneGatherPerPart) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 12, 3, 2});
  Value* s = Shuffle(b, x, 3);
  std::vector<Value*> parts =
      b.OpN("Split", {s, Ints(b, {5, 7})}, 2, {{"axis", Attribute::Int(-3)}});
  b.Output(parts[0]);
  b.Output(parts[1]);
  auto graph = b.Build();
  EXPECT_TRUE(testing::RunPassAndCompare(*graph, FoldChannelShuffle, kFeed));
  EXPECT_EQ(CountOps(*graph, "Split"), 0);
  EXPECT_EQ(CountOps(*graph, "Gather"), 2);
}

TEST(FoldChannelShuffle, AGatherOfAConstantGatherReadsTheSource) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 12, 3, 2});
  Value* g1 = b.Op("Gather", {x, Ints(b, {3, -1, 0, 5})}, {{"axis", Attribute::Int(1)}});
  b.Output(b.Op("Gather", {g1, Ints(b, {2, 2, -3})}, {{"axis", Attribute::Int(1)}}));
  auto graph = b.Build();
  EXPECT_TRUE(testing::RunPassAndCompare(*graph, FoldChannelShuffle, kFeed));
  EXPECT_EQ(CountOps(*graph, "Gather"), 1);
}

// Left alone: a transpose that moves another axis too, a shuffle whose middle is read
// elsewhere, a slice over another axis, a Gather on another axis.
TEST(FoldChannelShuffle, LeavesWhatIsNoPermutationOfOneAxis) {
  {
    GraphBuilder b;
    Value* x = b.Input("x", DType::kFloat32, {2, 12, 3, 2});
    Value* r = b.Op("Reshape", {x, Shape(b, {2, 2, 6, 3, 2})});
    Value* t = b.Op("Transpose", {r}, {{"perm", Attribute::Ints({0, 2, 1, 4, 3})}});
    b.Output(b.Op("Reshape", {t, Shape(b, {2, 12, 3, 2})}));
    auto graph = b.Build();
    EXPECT_FALSE(testing::RunPassAndCompare(*graph, FoldChannelShuffle, kFeed));
    EXPECT_EQ(CountOps(*graph, "Transpose"), 1);
  }
  {
    GraphBuilder b;
    Value* x = b.Input("x", DType::kFloat32, {2, 12, 3, 2});
    Value* r = b.Op("Reshape", {x, Shape(b, {2, 2, 6, 3, 2})});
    Value* t = b.Op("Transpose", {r}, {{"perm", Attribute::Ints({0, 2, 1, 3, 4})}});
    b.Output(b.Op("Reshape", {t, Shape(b, {2, 12, 3, 2})}));
    b.Output(b.Op("Relu", {t}));
    auto graph = b.Build();
    EXPECT_FALSE(testing::RunPassAndCompare(*graph, FoldChannelShuffle, kFeed));
  }
  {
    GraphBuilder b;
    Value* x = b.Input("x", DType::kFloat32, {2, 12, 3, 2});
    Value* s = Shuffle(b, x, 2);
    b.Output(b.Op("Slice", {s, Ints(b, {0}), Ints(b, {2}), Ints(b, {2})}));
    b.Output(b.Op("Gather", {s, Ints(b, {1, 0})}, {{"axis", Attribute::Int(3)}}));
    auto graph = b.Build();
    EXPECT_TRUE(testing::RunPassAndCompare(*graph, FoldChannelShuffle, kFeed));
    EXPECT_EQ(CountOps(*graph, "Slice"), 1);
    EXPECT_EQ(CountOps(*graph, "Gather"), 2);  // the shuffle's, and the one on axis 3
  }
}

}  // namespace
}  // namespace kiln::passes
