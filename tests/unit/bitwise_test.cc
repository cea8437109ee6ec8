// BitwiseAnd/Or/Xor/Not and BitCast: values by hand, broadcasting, narrow types, and the
// errors float operands and width mismatches give.
#include <cstring>

#include "tests/unit/op_test_util.h"

namespace kiln {
namespace {

using namespace optest;

TEST(Bitwise, AndOrXorNotBroadcast) {
  const Tensor a = Typed(DType::kUInt8, {0xF0, 0x0F, 0xFF, 0x00}, {2, 2});
  const Tensor b = Typed(DType::kUInt8, {0x3C, 0x01}, {2});
  auto r = RunOp("BitwiseAnd", {a, b});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[0], {0x30, 0x01, 0x3C, 0x00});
  r = RunOp("BitwiseOr", {a, b});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[0], {0xFC, 0x0F, 0xFF, 0x01});
  r = RunOp("BitwiseXor", {a, b});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[0], {0xCC, 0x0E, 0xC3, 0x01});
  r = RunOp("BitwiseNot", {Typed(DType::kInt32, {0, -1, 5}, {3})});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[0], {-1, 0, -6});
}

TEST(Bitwise, FloatOperandsAreUnsupported) {
  EXPECT_TRUE(absl::IsUnimplemented(RunOp("BitwiseAnd", {Iota({2}), Iota({2})}).status()));
  ExpectInvalid(RunOp("BitwiseOr", {Typed(DType::kInt8, {1, 2, 3}, {3}),
                                    Typed(DType::kInt8, {1, 2}, {2})})
                    .status());
}

TEST(BitCast, KeepsBits) {
  auto r = RunOp("BitCast", {Floats({1.0f, -2.0f}, {2})}, {{"to", Int(6)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dtype(), DType::kInt32);
  int32_t want;
  const float one = 1.0f;
  std::memcpy(&want, &one, 4);
  EXPECT_EQ((*r)[0].data<int32_t>()[0], want);
  auto n = RunOp("BitCast", {Typed(DType::kUInt4, {15, 8, 7}, {3})}, {{"to", Int(22)}});
  ASSERT_TRUE(n.ok()) << n.status();
  ExpectValues((*n)[0], {-1, -8, 7});  // uint4 bits read as int4
}

TEST(BitCast, WidthMismatchIsInvalid) {
  ExpectInvalid(RunOp("BitCast", {Floats({1.0f}, {1})}, {{"to", Int(7)}}).status());
  ExpectInvalid(RunKernel("BitCast", {Floats({1.0f}, {1})}, {{"to", Int(-3)}}).status());
  ExpectInvalid(RunKernel("BitCast", {Floats({1.0f}, {1})}).status());
}

}  // namespace
}  // namespace kiln
