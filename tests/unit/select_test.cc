// Data-dependent and reordering operators (Compress, NonZero, Unique, ReverseSequence,
// CenterCropPad, TensorScatter), the inverse window operators (MaxUnpool, Col2Im), Det,
// CumProd, Swish and SwiGLU: values by hand, shape rules, and clean errors on bad input.
#include <cmath>

#include "tests/unit/op_test_util.h"

namespace kiln {
namespace {

using namespace optest;

TEST(Select, CompressAndNonZero) {
  Tensor cond(DType::kBool, {3});
  cond.mutable_data<bool>()[0] = cond.mutable_data<bool>()[2] = true;
  auto c = RunOp("Compress", {Iota({3, 2}), cond}, {{"axis", Int(0)}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)[0].shape(), (std::vector<int64_t>{2, 2}));
  ExpectValues((*c)[0], {0, 1, 4, 5});
  auto flat = RunOp("Compress", {Iota({3, 2}), cond});
  ASSERT_TRUE(flat.ok()) << flat.status();
  ExpectValues((*flat)[0], {0, 2});
  auto nz = RunOp("NonZero", {Floats({0, 3, 0, -1}, {2, 2})});
  ASSERT_TRUE(nz.ok()) << nz.status();
  EXPECT_EQ((*nz)[0].shape(), (std::vector<int64_t>{2, 2}));
  ExpectValues((*nz)[0], {0, 1, 1, 1});
  Tensor long_cond(DType::kBool, {4});
  long_cond.mutable_data<bool>()[3] = true;
  ExpectInvalid(RunOp("Compress", {Iota({3, 2}), long_cond}, {{"axis", Int(0)}}).status());
  ExpectInvalid(RunOp("Compress", {Iota({3}), Iota({3})}).status());
}

TEST(Select, UniqueSortedAndInOrder) {
  const Tensor x = Floats({2, 1, 1, 3, 4, 3}, {6});
  auto s = RunOp("Unique", {x}, {}, 4);
  ASSERT_TRUE(s.ok()) << s.status();
  ExpectValues((*s)[0], {1, 2, 3, 4});
  ExpectValues((*s)[1], {1, 0, 3, 4});
  ExpectValues((*s)[2], {1, 0, 0, 2, 3, 2});
  ExpectValues((*s)[3], {2, 1, 2, 1});
  auto u = RunOp("Unique", {x}, {{"sorted", Int(0)}}, 4);
  ASSERT_TRUE(u.ok()) << u.status();
  ExpectValues((*u)[0], {2, 1, 3, 4});
  ExpectValues((*u)[2], {0, 1, 1, 2, 3, 2});
  auto rows = RunOp("Unique", {Floats({1, 0, 0, 1, 1, 0}, {3, 2})}, {{"axis", Int(0)}}, 4);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ExpectValues((*rows)[0], {0, 1, 1, 0});
  ExpectValues((*rows)[3], {1, 2});
  ExpectInvalid(RunOp("Unique", {x}, {{"axis", Int(3)}}, 4).status());
}

TEST(Reorder, ReverseSequenceCenterCropPadTensorScatter) {
  auto rs = RunOp("ReverseSequence", {Iota({3, 2}), Ints64({2, 3}, {2})},
                  {{"batch_axis", Int(1)}, {"time_axis", Int(0)}});
  ASSERT_TRUE(rs.ok()) << rs.status();
  ExpectValues((*rs)[0], {2, 5, 0, 3, 4, 1});
  ExpectInvalid(RunOp("ReverseSequence", {Iota({3, 2}), Ints64({4, 1}, {2})},
                      {{"batch_axis", Int(1)}, {"time_axis", Int(0)}})
                    .status());
  auto cc = RunOp("CenterCropPad", {Iota({4}), Ints64({2}, {1})});
  ASSERT_TRUE(cc.ok()) << cc.status();
  ExpectValues((*cc)[0], {1, 2});
  auto pad = RunOp("CenterCropPad", {Iota({2}, 1), Ints64({5}, {1})});
  ASSERT_TRUE(pad.ok()) << pad.status();
  ExpectValues((*pad)[0], {0, 1, 2, 0, 0});
  ExpectInvalid(RunOp("CenterCropPad", {Iota({4}), Ints64({2, 2}, {2})}).status());
  // Cache (1, 3, 1): write two steps at 2, wrapping to 0.
  auto ts = RunOp("TensorScatter", {Iota({1, 3, 1}), Floats({7, 8}, {1, 2, 1}), Ints64({2}, {1})},
                  {{"mode", Str("circular")}});
  ASSERT_TRUE(ts.ok()) << ts.status();
  ExpectValues((*ts)[0], {8, 1, 7});
  ExpectInvalid(
      RunOp("TensorScatter", {Iota({1, 3, 1}), Floats({7, 8}, {1, 2, 1}), Ints64({2}, {1})})
          .status());  // linear mode runs past the end
}

TEST(Unpool, MaxUnpoolAndCol2Im) {
  const Attrs pool{{"kernel_shape", Ints({2, 2})}, {"strides", Ints({2, 2})}};
  auto mu = RunOp("MaxUnpool", {Floats({5}, {1, 1, 1, 1}), Ints64({3}, {1, 1, 1, 1})}, pool);
  ASSERT_TRUE(mu.ok()) << mu.status();
  ExpectValues((*mu)[0], {0, 0, 0, 5});
  ExpectInvalid(
      RunOp("MaxUnpool", {Floats({5}, {1, 1, 1, 1}), Ints64({4}, {1, 1, 1, 1})}, pool).status());
  // Two 1x2 blocks over a 1x3 image with stride 1: the middle pixel gets both.
  auto ci = RunOp("Col2Im",
                  {Floats({1, 2, 10, 20}, {1, 2, 2}), Ints64({1, 3}, {2}), Ints64({1, 2}, {2})});
  ASSERT_TRUE(ci.ok()) << ci.status();
  EXPECT_EQ((*ci)[0].shape(), (std::vector<int64_t>{1, 1, 1, 3}));
  ExpectValues((*ci)[0], {1, 12, 20});
  ExpectInvalid(
      RunOp("Col2Im", {Floats({1, 2, 10, 20}, {1, 2, 2}), Ints64({1, 4}, {2}), Ints64({1, 2}, {2})})
          .status());  // 3 blocks expected, 2 given
}

TEST(Linalg, Det) {
  auto d = RunOp("Det", {Floats({1, 2, 3, 4, 0, 1, 1, 0}, {2, 2, 2})});
  ASSERT_TRUE(d.ok()) << d.status();
  ExpectValues((*d)[0], {-2, -1});
  ExpectInvalid(RunOp("Det", {Iota({2, 3})}).status());
  ExpectInvalid(RunKernel("Det", {Iota({3})}).status());
}

TEST(Activation, CumProdSwishSwiGlu) {
  auto cp = RunOp("CumProd", {Floats({1, 2, 3}, {3}), Ints64({0}, {})}, {{"exclusive", Int(1)}});
  ASSERT_TRUE(cp.ok()) << cp.status();
  ExpectValues((*cp)[0], {1, 1, 2});
  auto sw = RunOp("Swish", {Floats({0, 1}, {2})}, {{"alpha", Float(2.0f)}});
  ASSERT_TRUE(sw.ok()) << sw.status();
  ExpectValues((*sw)[0], {0, 1 / (1 + std::exp(-2.0))});
  auto g = RunOp("SwiGLU", {Floats({1}, {1}), Floats({3}, {1})});
  ASSERT_TRUE(g.ok()) << g.status();
  ExpectValues((*g)[0], {3 / (1 + std::exp(-1.0))});
  ExpectInvalid(RunOp("SwiGLU", {Iota({2}), Iota({1})}).status());
}

}  // namespace
}  // namespace kiln
