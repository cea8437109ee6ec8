// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: hand-computed losses for every
// reduction, weights and ignore_index, and the errors bad targets and attributes give.
#include <cmath>

#include "tests/unit/op_test_util.h"

namespace kiln {
namespace {

using namespace optest;

TEST(NllLoss, ReductionsWeightsAndIgnoreIndex) {
  // input (N=2, C=3), targets 2 and 0.
  const Tensor x = Floats({0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}, {2, 3});
  const Tensor t = Ints64({2, 0}, {2});
  auto none = RunOp("NegativeLogLikelihoodLoss", {x, t}, {{"reduction", Str("none")}});
  ASSERT_TRUE(none.ok()) << none.status();
  ExpectValues((*none)[0], {-0.3, -0.4});
  auto sum = RunOp("NegativeLogLikelihoodLoss", {x, t}, {{"reduction", Str("sum")}});
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ((*sum)[0].rank(), 0);
  ExpectValues((*sum)[0], {-0.7});
  const Tensor w = Floats({1.0f, 2.0f, 3.0f}, {3});
  auto mean = RunOp("NegativeLogLikelihoodLoss", {x, t, w});
  ASSERT_TRUE(mean.ok()) << mean.status();
  ExpectValues((*mean)[0], {(-0.3 * 3 - 0.4 * 1) / 4});
  // Ignoring class 0 leaves one element; ignoring everything gives 0/0.
  auto ign = RunOp("NegativeLogLikelihoodLoss", {x, t, w}, {{"ignore_index", Int(0)}});
  ASSERT_TRUE(ign.ok()) << ign.status();
  ExpectValues((*ign)[0], {-0.3});
  auto all =
      RunOp("NegativeLogLikelihoodLoss", {x, Ints64({5, 5}, {2})}, {{"ignore_index", Int(5)}});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(std::isnan((*all)[0].GetDouble(0)));
}

TEST(NllLoss, SpatialDimsKeepTargetShape) {
  const Tensor x = Iota({1, 2, 2}, 0.0f, 1.0f);  // x[0, c, d] = 2c + d
  auto r =
      RunOp("NegativeLogLikelihoodLoss", {x, Ints64({1, 0}, {1, 2})}, {{"reduction", Str("none")}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{1, 2}));
  ExpectValues((*r)[0], {-2, -1});
}

TEST(NllLoss, BadTargetsAndAttributesAreInvalid) {
  const Tensor x = Iota({2, 3});
  ExpectInvalid(RunOp("NegativeLogLikelihoodLoss", {x, Ints64({3, 0}, {2})}).status());
  ExpectInvalid(RunOp("NegativeLogLikelihoodLoss", {x, Ints64({-1, 0}, {2})}).status());
  ExpectInvalid(RunOp("NegativeLogLikelihoodLoss", {x, Ints64({0, 0, 0}, {3})}).status());
  ExpectInvalid(RunKernel("NegativeLogLikelihoodLoss", {x, Ints64({0, 0, 0}, {3})}).status());
  ExpectInvalid(
      RunOp("NegativeLogLikelihoodLoss", {x, Ints64({0, 0}, {2})}, {{"reduction", Str("max")}})
          .status());
  ExpectInvalid(
      RunKernel("NegativeLogLikelihoodLoss", {x, Ints64({0, 0}, {2}), Iota({2})}).status());
  ExpectInvalid(RunKernel("NegativeLogLikelihoodLoss", {x, Iota({2})}).status());
  ExpectInvalid(RunKernel("NegativeLogLikelihoodLoss", {Iota({3}), Ints64({0}, {1})}).status());
}

TEST(SoftmaxCrossEntropyLoss, LossAndLogProb) {
  const Tensor x = Floats({1.0f, 2.0f, 3.0f, 0.0f, 0.0f, 0.0f}, {2, 3});
  auto r = RunOp("SoftmaxCrossEntropyLoss", {x, Ints64({2, 1}, {2})}, {}, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  ExpectValues((*r)[1],
               {1 - lse, 2 - lse, 3 - lse, -std::log(3.0), -std::log(3.0), -std::log(3.0)});
  ExpectValues((*r)[0], {((lse - 3) + std::log(3.0)) / 2});
}

TEST(SoftmaxCrossEntropyLoss, ShapeRule) {
  auto s = InferOp("SoftmaxCrossEntropyLoss",
                   {{DType::kFloat32, {Dim::Symbol("N"), Dim(4), Dim(5)}},
                    {DType::kInt64, {Dim::Symbol("N"), Dim(5)}}},
                   {{"reduction", Str("none")}}, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(ShapeToString(*(*s)[0]), ShapeToString(Shape{Dim::Symbol("N"), Dim(5)}));
  EXPECT_EQ(ShapeToString(*(*s)[1]), ShapeToString(Shape{Dim::Symbol("N"), Dim(4), Dim(5)}));
  ExpectInvalid(InferOp("SoftmaxCrossEntropyLoss", {{DType::kFloat32, {Dim(2), Dim(4), Dim(5)}},
                                                    {DType::kInt64, {Dim(2), Dim(6)}}})
                    .status());
}

}  // namespace
}  // namespace kiln
