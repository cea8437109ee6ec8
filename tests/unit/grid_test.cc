// GridSample and AffineGrid: sampling by hand (corners, pixel centres, padding modes), the
// identity affine grid, shape rules, and the errors bad modes and shapes give.
#include "tests/unit/op_test_util.h"

namespace kiln {
namespace {

using namespace optest;

TEST(GridSample, LinearNearestAndPadding) {
  const Tensor x = Floats({1, 2, 3, 4}, {1, 1, 2, 2});
  // (x, y) = (0, 0) is the image centre; (-1, -1) the top-left corner (align_corners=1).
  const Tensor grid = Floats({0, 0, -1, -1}, {1, 1, 2, 2});
  auto lin = RunOp("GridSample", {x, grid}, {{"align_corners", Int(1)}, {"mode", Str("linear")}});
  ASSERT_TRUE(lin.ok()) << lin.status();
  EXPECT_EQ((*lin)[0].shape(), (std::vector<int64_t>{1, 1, 1, 2}));
  ExpectValues((*lin)[0], {2.5, 1});
  // Without align_corners, (-1, -1) is the outer corner of pixel (0, 0): a quarter of it.
  auto zeros = RunOp("GridSample", {x, grid}, {{"mode", Str("linear")}});
  ASSERT_TRUE(zeros.ok()) << zeros.status();
  ExpectValues((*zeros)[0], {2.5, 0.25});
  auto border =
      RunOp("GridSample", {x, grid}, {{"mode", Str("linear")}, {"padding_mode", Str("border")}});
  ASSERT_TRUE(border.ok()) << border.status();
  ExpectValues((*border)[0], {2.5, 1});
  auto nearest =
      RunOp("GridSample", {x, Floats({0.9f, 0.9f}, {1, 1, 1, 2})}, {{"mode", Str("nearest")}});
  ASSERT_TRUE(nearest.ok()) << nearest.status();
  ExpectValues((*nearest)[0], {4});
}

TEST(GridSample, BadModesAndShapesAreInvalid) {
  const Tensor x = Iota({1, 1, 2, 2}), grid = Iota({1, 1, 1, 2});
  ExpectInvalid(RunOp("GridSample", {x, grid}, {{"mode", Str("area")}}).status());
  ExpectInvalid(RunOp("GridSample", {x, grid}, {{"padding_mode", Str("wrap")}}).status());
  ExpectInvalid(RunOp("GridSample", {x, Iota({1, 1, 1, 3})}).status());
  ExpectInvalid(RunKernel("GridSample", {x, Iota({1, 1, 3})}).status());
}

TEST(AffineGrid, IdentityGivesTheBaseGrid) {
  const Tensor theta = Floats({1, 0, 0, 0, 1, 0}, {1, 2, 3});
  auto r = RunOp("AffineGrid", {theta, Ints64({1, 1, 2, 2}, {4})}, {{"align_corners", Int(1)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{1, 2, 2, 2}));
  ExpectValues((*r)[0], {-1, -1, 1, -1, -1, 1, 1, 1});
  auto centres = RunOp("AffineGrid", {theta, Ints64({1, 1, 1, 2}, {4})});
  ASSERT_TRUE(centres.ok()) << centres.status();
  ExpectValues((*centres)[0], {-0.5, 0, 0.5, 0});
  ExpectInvalid(RunOp("AffineGrid", {theta, Ints64({1, 1, 2, 2, 2}, {5})}).status());
  ExpectInvalid(RunKernel("AffineGrid", {Iota({2, 2, 3}), Ints64({1, 1, 2, 2}, {4})}).status());
}

}  // namespace
}  // namespace kiln
