// The quantization family: QuantizeLinear/DequantizeLinear granularities and types,
// DynamicQuantizeLinear, the integer and QLinear products, their shape rules, and the errors
// misfit scales, zero points and types give.
#include "tests/unit/op_test_util.h"

namespace kiln {
namespace {

using namespace optest;

TEST(QuantizeLinear, RoundsHalfToEvenAndSaturates) {
  const Tensor x = Floats({0.5f, 1.5f, 2.5f, -3.0f, 600.0f, -1.0f}, {6});
  auto r = RunOp("QuantizeLinear", {x, Floats({1.0f}, {}), Typed(DType::kUInt8, {1}, {})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dtype(), DType::kUInt8);
  ExpectValues((*r)[0], {1, 3, 3, 0, 255, 0});
  auto i8 = RunOp("QuantizeLinear", {x, Floats({2.0f}, {}), Typed(DType::kInt8, {0}, {})});
  ASSERT_TRUE(i8.ok()) << i8.status();
  ExpectValues((*i8)[0], {0, 1, 1, -2, 127, 0});  // 0.25, 0.75, 1.25, -1.5, 300, -0.5
}

TEST(QuantizeLinear, PerAxisBlockedAndInt4) {
  const Tensor x = Floats({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  auto axis = RunOp("QuantizeLinear", {x, Floats({1, 2}, {2}), Typed(DType::kInt8, {0, 0}, {2})},
                    {{"axis", Int(0)}});
  ASSERT_TRUE(axis.ok()) << axis.status();
  ExpectValues((*axis)[0], {1, 2, 3, 4, 2, 3, 4, 4});
  auto blocked = RunOp("QuantizeLinear", {x, Floats({1, 2, 1, 4}, {2, 2})},
                       {{"axis", Int(1)}, {"block_size", Int(2)}, {"output_dtype", Int(5)}});
  ASSERT_TRUE(blocked.ok()) << blocked.status();
  EXPECT_EQ((*blocked)[0].dtype(), DType::kInt16);
  ExpectValues((*blocked)[0], {1, 2, 2, 2, 5, 6, 2, 2});
  auto i4 = RunOp("QuantizeLinear", {x, Floats({1.0f}, {}), Typed(DType::kInt4, {0}, {})});
  ASSERT_TRUE(i4.ok()) << i4.status();
  ExpectValues((*i4)[0], {1, 2, 3, 4, 5, 6, 7, 7});
}

TEST(DequantizeLinear, ShiftsAndScales) {
  const Tensor x = Typed(DType::kUInt8, {0, 3, 128, 255}, {4});
  auto r = RunOp("DequantizeLinear", {x, Floats({0.5f}, {}), Typed(DType::kUInt8, {128}, {})});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[0], {-64, -62.5, 0, 63.5});
  auto f8 =
      RunOp("DequantizeLinear", {Typed(DType::kFloat8E4M3FN, {1.5, -2}, {2}), Floats({2.0f}, {})});
  ASSERT_TRUE(f8.ok()) << f8.status();
  ExpectValues((*f8)[0], {3, -4});
}

TEST(DynamicQuantizeLinear, RangeIncludesZero) {
  auto r = RunOp("DynamicQuantizeLinear", {Floats({0.0f, 2.0f, 2.55f}, {3})}, {}, 3);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[1], {0.01}, 1e-7);
  ExpectValues((*r)[2], {0});
  ExpectValues((*r)[0], {0, 200, 255});
}

TEST(QuantizedProducts, MatMulIntegerAndQLinearMatMul) {
  const Tensor a = Typed(DType::kUInt8, {1, 2, 3, 4}, {2, 2});
  const Tensor b = Typed(DType::kUInt8, {1, 0, 0, 1}, {2, 2});
  auto mi =
      RunOp("MatMulInteger", {a, b, Typed(DType::kUInt8, {1}, {}), Typed(DType::kUInt8, {0}, {})});
  ASSERT_TRUE(mi.ok()) << mi.status();
  EXPECT_EQ((*mi)[0].dtype(), DType::kInt32);
  ExpectValues((*mi)[0], {0, 1, 2, 3});
  // acc = a @ b = a; scale 0.5 * 1 / 0.25 = 2; y = 2 * acc + 10.
  auto q = RunOp("QLinearMatMul", {a, Floats({0.5f}, {}), Typed(DType::kUInt8, {0}, {}), b,
                                   Floats({1.0f}, {}), Typed(DType::kUInt8, {0}, {}),
                                   Floats({0.25f}, {}), Typed(DType::kUInt8, {10}, {})});
  ASSERT_TRUE(q.ok()) << q.status();
  ExpectValues((*q)[0], {12, 14, 16, 18});
}

TEST(QuantizedProducts, ConvIntegerPadsWithTheZeroPoint) {
  // x - 1 = 0 everywhere except the centre (4); padding contributes 0 after the shift.
  const Tensor x = Typed(DType::kUInt8, {1, 1, 1, 1, 5, 1, 1, 1, 1}, {1, 1, 3, 3});
  const Tensor w = Typed(DType::kUInt8, {1, 1, 1, 1}, {1, 1, 2, 2});
  auto r =
      RunOp("ConvInteger", {x, w, Typed(DType::kUInt8, {1}, {})}, {{"pads", Ints({1, 1, 1, 1})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{1, 1, 4, 4}));
  ExpectValues((*r)[0], {0, 0, 0, 0, 0, 4, 4, 0, 0, 4, 4, 0, 0, 0, 0, 0});
  auto q = RunOp("QLinearConv", {x, Floats({1.0f}, {}), Typed(DType::kUInt8, {1}, {}), w,
                                 Floats({0.5f}, {}), Typed(DType::kUInt8, {0}, {}),
                                 Floats({1.0f}, {}), Typed(DType::kUInt8, {3}, {})});
  ASSERT_TRUE(q.ok()) << q.status();
  ExpectValues((*q)[0], {5, 5, 5, 5});  // rint(4 * 0.5) + 3
}

TEST(Quantize, MisfitParametersAreInvalid) {
  const Tensor x = Iota({2, 4});
  ExpectInvalid(RunOp("QuantizeLinear", {x, Floats({1, 2, 3}, {3})}).status());
  ExpectInvalid(RunOp("QuantizeLinear", {x, Floats({1, 2}, {2}), Typed(DType::kUInt8, {0}, {})},
                      {{"axis", Int(0)}})
                    .status());  // zero point shape differs
  ExpectInvalid(RunOp("QuantizeLinear", {x, Floats({1, 2, 3}, {1, 3})},
                      {{"axis", Int(1)}, {"block_size", Int(2)}})
                    .status());
  ExpectInvalid(RunOp("QuantizeLinear", {x, Floats({1}, {}), Typed(DType::kUInt8, {0}, {})},
                      {{"output_dtype", Int(3)}})
                    .status());
  ExpectInvalid(RunKernel("QuantizeLinear", {x, Floats({1, 2}, {2})}, {{"axis", Int(5)}}).status());
  ExpectInvalid(RunOp("DequantizeLinear", {Typed(DType::kUInt8, {1}, {1}), Floats({1}, {}),
                                           Typed(DType::kInt8, {0}, {})})
                    .status());
  EXPECT_TRUE(
      absl::IsUnimplemented(RunKernel("DequantizeLinear", {Iota({2}), Floats({1}, {})}).status()));
  const Tensor a = Typed(DType::kUInt8, {1, 2, 3, 4}, {2, 2});
  ExpectInvalid(RunKernel("MatMulInteger", {a, a, Typed(DType::kUInt8, {1, 2, 3}, {3})}).status());
  ExpectInvalid(RunKernel("QLinearMatMul", {a, Floats({1}, {}), Tensor(), a, Floats({1}, {}),
                                            Tensor(), Floats({1, 1}, {2}), Tensor()})
                    .status());
}

TEST(Quantize, ShapeRules) {
  auto q = InferOp("QuantizeLinear",
                   {{DType::kFloat32, {Dim::Symbol("N"), Dim(3)}}, {DType::kFloat32, {}}},
                   {{"output_dtype", Int(3)}});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(ShapeToString(*(*q)[0]), ShapeToString(Shape{Dim::Symbol("N"), Dim(3)}));
  auto m = InferOp("QLinearMatMul", {{DType::kUInt8, {Dim(2), Dim(5), Dim(4)}},
                                     {DType::kFloat32, {}},
                                     {DType::kUInt8, {}},
                                     {DType::kUInt8, {Dim(4), Dim(3)}},
                                     {DType::kFloat32, {}},
                                     {DType::kUInt8, {}},
                                     {DType::kFloat32, {}},
                                     {DType::kUInt8, {}}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(ShapeToString(*(*m)[0]), ShapeToString(Shape{Dim(2), Dim(5), Dim(3)}));
  ExpectInvalid(InferOp("MatMulInteger",
                        {{DType::kUInt8, {Dim(2), Dim(5)}}, {DType::kUInt8, {Dim(4), Dim(3)}}})
                    .status());
}

}  // namespace
}  // namespace kiln
