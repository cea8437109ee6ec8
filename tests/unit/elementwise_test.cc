// Element-wise operators: reference kernels and shape rules, through tiny built graphs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ops/elementwise_util.h"
#include "ops/interpreter.h"

namespace kiln {
namespace {

Tensor Ints(DType t, std::vector<int64_t> shape, const std::vector<int64_t>& v) {
  Tensor x(t, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) x.SetInt(static_cast<int64_t>(i), v[i]);
  return x;
}

Tensor Reals(DType t, std::vector<int64_t> shape, const std::vector<double>& v) {
  Tensor x(t, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) x.SetDouble(static_cast<int64_t>(i), v[i]);
  return x;
}

// Builds `op` over graph inputs fed with `ins` (nullptr: omitted optional input), infers
// shapes, runs the reference interpreter, and checks inference agreed with the kernel.
absl::StatusOr<Tensor> RunOp(const std::string& op, const std::vector<const Tensor*>& ins,
                             std::map<std::string, Attribute> attrs = {}) {
  GraphBuilder b;
  std::vector<Value*> values;
  ref::TensorMap feeds;
  for (size_t i = 0; i < ins.size(); ++i) {
    if (!ins[i]) {
      values.push_back(nullptr);
      continue;
    }
    std::string name = "in" + std::to_string(i);
    values.push_back(b.Input(name, ins[i]->dtype(), ToShape(ins[i]->shape())));
    feeds[name] = *ins[i];
  }
  Value* y = b.Op(op, values, std::move(attrs));
  b.Output(y);
  std::unique_ptr<Graph> g = b.Build();
  RETURN_IF_ERROR(shape::InferShapes(*g));
  ASSIGN_OR_RETURN(ref::TensorMap outs, ref::Run(*g, feeds));
  Tensor out = outs.begin()->second;
  EXPECT_EQ(y->dtype, out.dtype()) << op;
  EXPECT_TRUE(y->shape && IsStatic(*y->shape) && StaticDims(*y->shape) == out.shape()) << op;
  return out;
}

TEST(Elementwise, AddBroadcastsFloat) {
  Tensor a = Reals(DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Reals(DType::kFloat32, {3}, {10, 20, 30});
  absl::StatusOr<Tensor> y = RunOp("Add", {&a, &b});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(y->ToDoubleVector(), (std::vector<double>{11, 22, 33, 14, 25, 36}));
}

TEST(Elementwise, Int64MathIsExactAndWraps) {
  const int64_t big = (int64_t{1} << 62) + 1;  // not representable in double
  Tensor a = Ints(DType::kInt64, {2}, {big, std::numeric_limits<int64_t>::max()});
  Tensor b = Ints(DType::kInt64, {2}, {2, 2});
  absl::StatusOr<Tensor> sum = RunOp("Add", {&a, &b});
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->data<int64_t>()[0], big + 2);
  EXPECT_EQ(sum->data<int64_t>()[1], std::numeric_limits<int64_t>::min() + 1);
  absl::StatusOr<Tensor> prod = RunOp("Mul", {&a, &b});
  ASSERT_TRUE(prod.ok()) << prod.status();
  EXPECT_EQ(prod->data<int64_t>()[1], -2);
}

TEST(Elementwise, UInt64AboveInt64Max) {
  Tensor a(DType::kUInt64, {2});
  a.SetUInt(0, ~uint64_t{0});
  a.SetUInt(1, 5);
  Tensor b(DType::kUInt64, {2});
  b.SetUInt(0, (uint64_t{1} << 63) + 7);
  b.SetUInt(1, 9);
  absl::StatusOr<Tensor> y = RunOp("Min", {&a, &b});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->data<uint64_t>()[0], (uint64_t{1} << 63) + 7);
  EXPECT_EQ(y->data<uint64_t>()[1], 5u);
}

TEST(Elementwise, IntegerDivTruncatesAndModFollowsFmod) {
  Tensor a = Ints(DType::kInt32, {4}, {-7, 7, -7, std::numeric_limits<int32_t>::min()});
  Tensor b = Ints(DType::kInt32, {4}, {2, -2, -2, -1});
  absl::StatusOr<Tensor> q = RunOp("Div", {&a, &b});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->ToInt64Vector(),
            (std::vector<int64_t>{-3, -3, 3, std::numeric_limits<int32_t>::min()}));
  absl::StatusOr<Tensor> py = RunOp("Mod", {&a, &b});
  ASSERT_TRUE(py.ok()) << py.status();
  EXPECT_EQ(py->ToInt64Vector(), (std::vector<int64_t>{1, -1, -1, 0}));
  absl::StatusOr<Tensor> c = RunOp("Mod", {&a, &b}, {{"fmod", Attribute::Int(1)}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ToInt64Vector(), (std::vector<int64_t>{-1, 1, -1, 0}));
}

TEST(Elementwise, FloatModSignOfDivisor) {
  Tensor a = Reals(DType::kFloat64, {2}, {-4.5, 4.5});
  Tensor b = Reals(DType::kFloat64, {2}, {2.0, -2.0});
  absl::StatusOr<Tensor> y = RunOp("Mod", {&a, &b}, {{"fmod", Attribute::Int(0)}});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->ToDoubleVector(), (std::vector<double>{1.5, -1.5}));
}

TEST(Elementwise, IntegerDivisionByZeroIsAnError) {
  Tensor a = Ints(DType::kInt8, {2}, {1, 2});
  Tensor b = Ints(DType::kInt8, {2}, {1, 0});
  for (const char* op : {"Div", "Mod"}) {
    absl::StatusOr<Tensor> y = RunOp(op, {&a, &b});
    EXPECT_TRUE(absl::IsInvalidArgument(y.status())) << op << ": " << y.status();
  }
}

TEST(Elementwise, PowMixedDtypes) {
  Tensor base = Ints(DType::kInt32, {3}, {3, -2, 2});
  Tensor e = Ints(DType::kInt64, {3}, {4, 3, 31});
  absl::StatusOr<Tensor> y = RunOp("Pow", {&base, &e});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), DType::kInt32);
  EXPECT_EQ(y->ToInt64Vector(),
            (std::vector<int64_t>{81, -8, std::numeric_limits<int32_t>::min()}));  // wraps
  Tensor fe = Reals(DType::kFloat32, {3}, {0.5, 2, 2});
  absl::StatusOr<Tensor> z = RunOp("Pow", {&base, &fe});
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->ToInt64Vector(), (std::vector<int64_t>{1, 4, 4}));  // sqrt(3) truncates
}

TEST(Elementwise, RoundHalfToEven) {
  Tensor x = Reals(DType::kFloat32, {6}, {0.5, 1.5, 2.5, -0.5, -1.5, 2.6});
  absl::StatusOr<Tensor> y = RunOp("Round", {&x});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->ToDoubleVector(), (std::vector<double>{0, 2, 2, -0.0, -2, 3}));
}

TEST(Elementwise, ClipOptionalBoundsAndMinAboveMax) {
  Tensor x = Ints(DType::kInt8, {4}, {-100, -1, 5, 100});
  Tensor lo = Ints(DType::kInt8, {}, {0});
  Tensor hi = Ints(DType::kInt8, {}, {10});
  absl::StatusOr<Tensor> only_min = RunOp("Clip", {&x, &lo});
  ASSERT_TRUE(only_min.ok()) << only_min.status();
  EXPECT_EQ(only_min->ToInt64Vector(), (std::vector<int64_t>{0, 0, 5, 100}));
  absl::StatusOr<Tensor> only_max = RunOp("Clip", {&x, nullptr, &hi});
  ASSERT_TRUE(only_max.ok()) << only_max.status();
  EXPECT_EQ(only_max->ToInt64Vector(), (std::vector<int64_t>{-100, -1, 5, 10}));
  absl::StatusOr<Tensor> swapped = RunOp("Clip", {&x, &hi, &lo});
  ASSERT_TRUE(swapped.ok()) << swapped.status();
  EXPECT_EQ(swapped->ToInt64Vector(), (std::vector<int64_t>{0, 0, 0, 0}));
}

TEST(Elementwise, WhereBroadcastsAllThree) {
  Tensor c = Ints(DType::kBool, {2, 1}, {1, 0});
  Tensor x = Ints(DType::kInt64, {2}, {1, 2});
  Tensor y = Ints(DType::kInt64, {}, {-9});
  absl::StatusOr<Tensor> out = RunOp("Where", {&c, &x, &y});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(out->ToInt64Vector(), (std::vector<int64_t>{1, 2, -9, -9}));
}

TEST(Elementwise, ComparisonsProduceBool) {
  Tensor a = Reals(DType::kFloat16, {3}, {1, 2, NAN});
  Tensor b = Reals(DType::kFloat16, {1}, {2});
  absl::StatusOr<Tensor> y = RunOp("GreaterOrEqual", {&a, &b});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), DType::kBool);
  EXPECT_EQ(y->ToInt64Vector(), (std::vector<int64_t>{0, 1, 0}));
}

TEST(Elementwise, PReluSlopeBroadcastsToX) {
  Tensor x = Reals(DType::kFloat32, {2, 2}, {-1, 1, -2, 2});
  Tensor slope = Reals(DType::kFloat32, {2}, {0.5, 0.25});
  absl::StatusOr<Tensor> y = RunOp("PRelu", {&x, &slope});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->ToDoubleVector(), (std::vector<double>{-0.5, 1, -1, 2}));
  Tensor wide = Reals(DType::kFloat32, {3, 2, 2}, std::vector<double>(12, 1.0));
  EXPECT_TRUE(absl::IsInvalidArgument(RunOp("PRelu", {&x, &wide}).status()));
}

TEST(Elementwise, HalfResultsAreRoundedOnceFromDouble) {
  // 1 + 2^-11 + 2^-40 lies just above the midpoint between two halves: rounding it to float
  // first would land exactly on the midpoint and tie down to 1.0.
  const double d = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(HalfToFloat(ref::ew::Store<Float16>(d).bits), 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(ref::ew::SaturateCast<int8_t>(1e9), 127);
  EXPECT_EQ(ref::ew::SaturateCast<uint64_t>(-3.0), 0u);
  EXPECT_EQ(ref::ew::SaturateCast<int32_t>(NAN), 0);
}

TEST(Elementwise, GeluAndActivationsMatchFormulas) {
  Tensor x = Reals(DType::kFloat64, {3}, {-1.0, 0.0, 2.0});
  absl::StatusOr<Tensor> g = RunOp("Gelu", {&x});
  ASSERT_TRUE(g.ok()) << g.status();
  for (int i = 0; i < 3; ++i) {
    double v = x.GetDouble(i);
    EXPECT_DOUBLE_EQ(g->GetDouble(i), 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
  }
  absl::StatusOr<Tensor> bad = RunOp("Gelu", {&x}, {{"approximate", Attribute::String("x")}});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  absl::StatusOr<Tensor> relu = RunOp("Relu", {&x});
  ASSERT_TRUE(relu.ok());
  EXPECT_EQ(relu->ToDoubleVector(), (std::vector<double>{0, 0, 2}));
}

TEST(Elementwise, IncompatibleBroadcastIsInvalid) {
  Tensor a = Reals(DType::kFloat32, {2, 3}, {});
  Tensor b = Reals(DType::kFloat32, {4}, {});
  EXPECT_TRUE(absl::IsInvalidArgument(RunOp("Add", {&a, &b}).status()));
  // The kernel alone (no shape inference in front) rejects it too.
  Node node;
  node.op_type = "Add";
  absl::StatusOr<std::vector<Tensor>> out = ref::RunNode(node, {&a, &b});
  EXPECT_TRUE(absl::IsInvalidArgument(out.status())) << out.status();
}

TEST(Elementwise, UnsupportedDtypesAreUnimplemented) {
  Node node;
  node.op_type = "Relu";
  Tensor f8(DType::kFloat8E4M3FN, {2});
  absl::StatusOr<std::vector<Tensor>> out = ref::RunNode(node, {&f8});
  EXPECT_TRUE(absl::IsUnimplemented(out.status())) << out.status();
  EXPECT_NE(out.status().message().find("Relu"), std::string::npos);
  Tensor i32 = Ints(DType::kInt32, {1}, {4});
  node.op_type = "Sqrt";  // the schema has no integer Sqrt
  EXPECT_TRUE(absl::IsUnimplemented(ref::RunNode(node, {&i32}).status()));
}

TEST(Elementwise, MixedDtypesAreInvalid) {
  Tensor a = Reals(DType::kFloat32, {1}, {1});
  Tensor b = Reals(DType::kFloat64, {1}, {1});
  Node node;
  node.op_type = "Sub";
  EXPECT_TRUE(absl::IsInvalidArgument(ref::RunNode(node, {&a, &b}).status()));
  node.op_type = "Add";
  EXPECT_TRUE(absl::IsInvalidArgument(ref::RunNode(node, {&a, nullptr}).status()));
}

TEST(ElementwiseShape, SymbolicBroadcastAndBoolOutputs) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("N"), 1, 4});
  Value* y = b.Input("y", DType::kFloat32, {3, 1});
  Value* s = b.Op("Add", {x, y});
  Value* c = b.Op("Less", {s, x});
  Value* w = b.Op("Where", {c, s, x});
  Value* nan = b.Op("IsNaN", {w});
  Value* p = b.Op("Pow", {w, b.Input("e", DType::kInt64, {})});
  for (Value* v : {s, c, w, nan, p}) b.Output(v);
  std::unique_ptr<Graph> g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  Shape want = {Dim::Symbol("N"), 3, 4};
  EXPECT_EQ(*s->shape, want);
  EXPECT_EQ(s->dtype, DType::kFloat32);
  EXPECT_EQ(c->dtype, DType::kBool);
  EXPECT_EQ(*w->shape, want);
  EXPECT_EQ(w->dtype, DType::kFloat32);
  EXPECT_EQ(nan->dtype, DType::kBool);
  EXPECT_EQ(p->dtype, DType::kFloat32);
}

TEST(ElementwiseShape, RejectsMismatchedDtypesAndShapes) {
  {
    GraphBuilder b;
    b.Output(b.Op("Mul", {b.Input("a", DType::kFloat32, {2}), b.Input("b", DType::kInt32, {2})}));
    EXPECT_TRUE(absl::IsInvalidArgument(shape::InferShapes(*b.Build())));
  }
  {
    GraphBuilder b;
    b.Output(b.Op("Sum", {b.Input("a", DType::kFloat32, {2, 3}), b.Input("b", DType::kFloat32, {3}),
                          b.Input("c", DType::kFloat32, {2, 2})}));
    EXPECT_TRUE(absl::IsInvalidArgument(shape::InferShapes(*b.Build())));
  }
}

}  // namespace
}  // namespace kiln
