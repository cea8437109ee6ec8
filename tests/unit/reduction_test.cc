// Reductions, search and indexing: reference kernels and their shape rules. Each test builds
// a tiny graph, infers shapes, runs the reference interpreter and checks the numbers; Eval
// also checks that every statically inferred output shape matches what the kernel produced.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ops/interpreter.h"

namespace kiln {
namespace {

using Attrs = std::map<std::string, Attribute>;

Tensor Make(DType dtype, std::vector<int64_t> shape, const std::vector<double>& values) {
  Tensor t(dtype, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i) t.SetDouble(static_cast<int64_t>(i), values[i]);
  return t;
}

Tensor Ints(DType dtype, std::vector<int64_t> shape, const std::vector<int64_t>& values) {
  Tensor t(dtype, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i) t.SetInt(static_cast<int64_t>(i), values[i]);
  return t;
}

// Infers shapes, runs, and returns the graph outputs in order.
absl::StatusOr<std::vector<Tensor>> Eval(Graph& g, const ref::TensorMap& feeds = {}) {
  RETURN_IF_ERROR(shape::InferShapes(g));
  ASSIGN_OR_RETURN(ref::TensorMap outs, ref::Run(g, feeds));
  std::vector<Tensor> result;
  for (Value* v : g.outputs) {
    const Tensor& t = outs.at(v->name);
    EXPECT_EQ(t.dtype(), v->dtype) << v->name;
    if (v->shape && IsStatic(*v->shape)) {
      EXPECT_EQ(StaticDims(*v->shape), t.shape()) << v->name;
    }
    result.push_back(t);
  }
  return result;
}

// One node over constant-free inputs: x is fed, everything else is a constant.
absl::StatusOr<std::vector<Tensor>> RunOp(const std::string& op, const Tensor& x,
                                          std::vector<Tensor> constants, Attrs attrs = {},
                                          size_t num_outputs = 1) {
  GraphBuilder b;
  std::vector<Value*> ins = {b.Input("x", x.dtype(), ToShape(x.shape()))};
  for (size_t i = 0; i < constants.size(); ++i) {
    ins.push_back(constants[i].defined() ? b.Constant("c" + std::to_string(i), constants[i])
                                         : nullptr);
  }
  for (Value* v : b.OpN(op, ins, num_outputs, std::move(attrs))) b.Output(v);
  auto g = b.Build();
  return Eval(*g, {{"x", x}});
}

std::vector<double> Values(const Tensor& t) { return t.ToDoubleVector(); }

Tensor X23() { return Tensor::FromFloat({1, 2, 3, 4, 5, 6}, {2, 3}); }

// --- Reduce* -------------------------------------------------------------------------------

TEST(Reduce, SumOverAxisWithAndWithoutKeepdims) {
  auto r =
      RunOp("ReduceSum", X23(), {Tensor::FromInt64({1}, {1})}, {{"keepdims", Attribute::Int(0)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{2}));
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{6, 15}));
  r = RunOp("ReduceSum", X23(), {Tensor::FromInt64({-2}, {1})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{5, 7, 9}));
}

TEST(Reduce, EveryKindOverAllAxes) {
  const std::vector<std::pair<std::string, double>> cases = {
      {"ReduceL1", 21},
      {"ReduceL2", std::sqrt(91.0)},
      {"ReduceLogSum", std::log(21.0)},
      {"ReduceLogSumExp",
       6 + std::log(1 + std::exp(-1) + std::exp(-2) + std::exp(-3) + std::exp(-4) + std::exp(-5))},
      {"ReduceMax", 6},
      {"ReduceMean", 3.5},
      {"ReduceMin", 1},
      {"ReduceProd", 720},
      {"ReduceSum", 21},
      {"ReduceSumSquare", 91}};
  for (const auto& [op, want] : cases) {
    auto r = RunOp(op, X23(), {}, {{"keepdims", Attribute::Int(0)}});
    ASSERT_TRUE(r.ok()) << op << ": " << r.status();
    EXPECT_TRUE((*r)[0].shape().empty()) << op;
    EXPECT_NEAR((*r)[0].GetDouble(0), want, 1e-4) << op;
  }
}

TEST(Reduce, IntegerSumIsExact) {
  // 2^24 + 1 is not a float32; an int32 sum must not lose it.
  Tensor x = Ints(DType::kInt32, {3}, {16777216, 1, -2});
  auto r = RunOp("ReduceSum", x, {}, {{"keepdims", Attribute::Int(0)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].GetInt(0), 16777215);
  Tensor big(DType::kUInt64, {2});
  big.SetUInt(0, 18446744073709551000ull);
  big.SetUInt(1, 5);
  r = RunOp("ReduceMax", big, {}, {{"keepdims", Attribute::Int(0)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].GetUInt(0), 18446744073709551000ull);
  r = RunOp("ReduceMean", Ints(DType::kInt64, {2}, {-3, -4}), {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].GetInt(0), -3);  // -3.5 truncated toward zero, like numpy's astype
}

TEST(Reduce, HalfInputsAccumulateInDouble) {
  // Summed in half precision, 2048 + 1 rounds back to 2048 and the total comes out 2048.
  auto r = RunOp("ReduceSum", Make(DType::kFloat16, {3}, {2048, 1, 1}), {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].GetDouble(0), 2050);
  r = RunOp("CumSum", Make(DType::kBFloat16, {2}, {1, 2}), {Tensor::FromInt64({0})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{1, 3}));
}

TEST(Reduce, NoopWithEmptyAxesStillAppliesTheElementOperation) {
  Tensor x = Tensor::FromFloat({-1, 2, -3}, {3});
  Tensor empty(DType::kInt64, {0});  // not FromInt64({}): memcpy from a null pointer
  Attrs noop = {{"noop_with_empty_axes", Attribute::Int(1)}};
  auto r = RunOp("ReduceSum", x, {empty}, noop);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{-1, 2, -3}));
  r = RunOp("ReduceSumSquare", x, {empty}, noop);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{1, 4, 9}));
  // Without noop, empty axes reduce everything.
  r = RunOp("ReduceSum", x, {empty});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{1}));
  EXPECT_EQ((*r)[0].GetDouble(0), -2);
}

TEST(Reduce, EmptySetIdentities) {
  Tensor x(DType::kFloat32, {2, 0, 4});
  Tensor axis1 = Tensor::FromInt64({1}, {1});
  const std::vector<std::pair<std::string, double>> cases = {{"ReduceSum", 0},
                                                             {"ReduceProd", 1},
                                                             {"ReduceMax", -INFINITY},
                                                             {"ReduceMin", INFINITY},
                                                             {"ReduceLogSumExp", -INFINITY},
                                                             {"ReduceL2", 0}};
  for (const auto& [op, want] : cases) {
    auto r = RunOp(op, x, {axis1});
    ASSERT_TRUE(r.ok()) << op << ": " << r.status();
    EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{2, 1, 4})) << op;
    EXPECT_EQ((*r)[0].GetDouble(5), want) << op;
  }
  auto r = RunOp("ReduceMax", Tensor(DType::kInt32, {0, 2}), {Tensor::FromInt64({0}, {1})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].GetInt(1), std::numeric_limits<int32_t>::lowest());
}

TEST(Reduce, LogSumExpIsStableForLargeInputs) {
  auto r = RunOp("ReduceLogSumExp", Tensor::FromFloat({1000, 1000}, {2}), {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR((*r)[0].GetDouble(0), 1000 + std::log(2.0), 1e-3);
}

TEST(Reduce, BoolMaxAndMin) {
  Tensor b = Ints(DType::kBool, {2, 2}, {1, 0, 0, 0});
  auto r = RunOp("ReduceMax", b, {Tensor::FromInt64({1}, {1})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{1, 0}));
  EXPECT_EQ(RunOp("ReduceSum", b, {}).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(Reduce, RejectsBadAxes) {
  auto r = RunOp("ReduceSum", X23(), {Tensor::FromInt64({2}, {1})});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = RunOp("ReduceSum", X23(), {Tensor::FromInt64({1, -1}, {2})});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Reduce, UnsupportedDTypeIsUnimplementedAndNamesTheNode) {
  Node node;
  node.name = "r1";
  node.op_type = "ReduceSum";
  node.opset = 18;
  auto bytes = std::make_shared<std::array<uint8_t, 64>>();
  Tensor f8 = Tensor::View(DType::kFloat8E4M3FN, {4}, bytes, bytes->data());
  auto r = ref::RunNode(node, {&f8});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("'r1'"), std::string::npos) << r.status();
  node.op_type = "Gather";
  Tensor idx = Tensor::FromInt64({0}, {1});
  EXPECT_EQ(ref::RunNode(node, {&f8, &idx}).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(ReduceShape, ConstantAndRuntimeAxes) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("N"), 3, 4});
  Value* axes = b.Input("axes", DType::kInt64, {2});
  Value* c = b.Constant("c", Tensor::FromInt64({-1}, {1}));
  Value* exact = b.Op("ReduceMean", {x, c}, {{"keepdims", Attribute::Int(0)}});
  Value* kept = b.Op("ReduceMean", {x, axes});
  Value* dropped = b.Op("ReduceMean", {x, axes}, {{"keepdims", Attribute::Int(0)}});
  Value* arg = b.Op("ArgMax", {x}, {{"axis", Attribute::Int(1)}});
  auto g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  EXPECT_EQ(*exact->shape, (Shape{Dim::Symbol("N"), 3}));
  EXPECT_EQ(*kept->shape, (Shape{Dim(), Dim(), Dim()}));
  EXPECT_EQ(*dropped->shape, (Shape{Dim()}));
  EXPECT_EQ(*arg->shape, (Shape{Dim::Symbol("N"), 1, 4}));
  EXPECT_EQ(arg->dtype, DType::kInt64);
}

// --- ArgMax / ArgMin, TopK, CumSum ---------------------------------------------------------

TEST(Arg, SelectLastIndexAndKeepdims) {
  Tensor x = Tensor::FromFloat({2, 5, 5, 1, 1, 0}, {2, 3});
  auto r = RunOp("ArgMax", x, {}, {{"axis", Attribute::Int(1)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ((*r)[0].ToInt64Vector(), (std::vector<int64_t>{1, 0}));
  r = RunOp("ArgMax", x, {},
            {{"axis", Attribute::Int(1)},
             {"select_last_index", Attribute::Int(1)},
             {"keepdims", Attribute::Int(0)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].ToInt64Vector(), (std::vector<int64_t>{2, 1}));
  r = RunOp("ArgMin", x, {}, {{"axis", Attribute::Int(0)}, {"keepdims", Attribute::Int(0)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].ToInt64Vector(), (std::vector<int64_t>{1, 1, 1}));
}

TEST(TopK, TiesTakeTheLowerIndexFirst) {
  Tensor x = Tensor::FromFloat({3, 1, 3, 2, 3}, {1, 5});
  auto r = RunOp("TopK", x, {Tensor::FromInt64({3}, {1})}, {}, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{3, 3, 3}));
  EXPECT_EQ((*r)[1].ToInt64Vector(), (std::vector<int64_t>{0, 2, 4}));
  r = RunOp("TopK", x, {Tensor::FromInt64({2}, {1})}, {{"largest", Attribute::Int(0)}}, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{1, 2}));
  EXPECT_EQ((*r)[1].ToInt64Vector(), (std::vector<int64_t>{1, 3}));
  r = RunOp("TopK", x, {Tensor::FromInt64({6}, {1})}, {}, 2);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CumSum, ExclusiveAndReverse) {
  Tensor x = Ints(DType::kInt32, {4}, {1, 2, 3, 4});
  Tensor axis = Tensor::FromInt64({0});
  auto r = RunOp("CumSum", x, {axis});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].ToInt64Vector(), (std::vector<int64_t>{1, 3, 6, 10}));
  r = RunOp("CumSum", x, {axis},
            {{"exclusive", Attribute::Int(1)}, {"reverse", Attribute::Int(1)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].ToInt64Vector(), (std::vector<int64_t>{9, 7, 4, 0}));
  r = RunOp("CumSum", X23(), {Tensor::FromInt64({-1})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{1, 3, 6, 4, 9, 15}));
}

// --- Gather / Scatter ----------------------------------------------------------------------

TEST(Gather, NegativeIndicesAndAxis) {
  auto r = RunOp("Gather", X23(), {Tensor::FromInt64({-1, 0}, {2})}, {{"axis", Attribute::Int(1)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{3, 1, 6, 4}));
  r = RunOp("Gather", X23(), {Tensor::FromInt64({1})});  // scalar index drops the axis
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{4, 5, 6}));
}

TEST(Gather, OutOfRangeIndicesAreInvalidArgument) {
  const absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(RunOp("Gather", X23(), {Tensor::FromInt64({2}, {1})}).status().code(), kInvalid);
  EXPECT_EQ(RunOp("Gather", X23(), {Tensor::FromInt64({-3}, {1})}).status().code(), kInvalid);
  EXPECT_EQ(RunOp("GatherElements", X23(), {Tensor::FromInt64({0, 3}, {1, 2})},
                  {{"axis", Attribute::Int(1)}})
                .status()
                .code(),
            kInvalid);
  EXPECT_EQ(RunOp("GatherND", X23(), {Tensor::FromInt64({1, 3}, {1, 2})}).status().code(),
            kInvalid);
  Tensor upd = Tensor::FromFloat({9}, {1, 1});
  EXPECT_EQ(RunOp("ScatterElements", X23(), {Tensor::FromInt64({2}, {1, 1}), upd}).status().code(),
            kInvalid);
  EXPECT_EQ(
      RunOp("ScatterND", X23(), {Tensor::FromInt64({0, -4}, {1, 2}), Tensor::FromFloat({9}, {1})})
          .status()
          .code(),
      kInvalid);
}

TEST(Gather, MalformedInputsFailCleanly) {
  const absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
  Tensor nan = Tensor::FromFloat({NAN});
  Tensor vals = Tensor::FromFloat({0, 1}, {2});
  // Indices wider than the data on a non-indexed axis.
  EXPECT_EQ(
      RunOp("GatherElements", X23(), {Tensor::FromInt64({0, 0, 0, 0}, {1, 4})}).status().code(),
      kInvalid);
  EXPECT_EQ(RunOp("GatherND", X23(), {Tensor::FromInt64({0, 0, 0}, {1, 3})}).status().code(),
            kInvalid);
  EXPECT_EQ(RunOp("GatherND", X23(), {Tensor::FromInt64({0, 0, 0}, {3, 1})},
                  {{"batch_dims", Attribute::Int(1)}})
                .status()
                .code(),
            kInvalid);
  EXPECT_EQ(RunOp("Trilu", Tensor::FromFloat({1, 2}, {2}), {}).status().code(), kInvalid);
  EXPECT_EQ(RunOp("CumSum", X23(), {Tensor::FromInt64({2})}).status().code(), kInvalid);
  EXPECT_EQ(RunOp("ArgMax", Tensor(DType::kFloat32, {2, 0}), {}, {{"axis", Attribute::Int(1)}})
                .status()
                .code(),
            kInvalid);
  EXPECT_EQ(RunOp("OneHot", Tensor::FromInt64({0}, {1}), {nan, vals}).status().code(), kInvalid);
  EXPECT_EQ(RunOp("Range", Tensor::FromFloat({0}), {nan, Tensor::FromFloat({1})}).status().code(),
            kInvalid);
}

TEST(Gather, ElementsAndND) {
  auto r = RunOp("GatherElements", X23(), {Tensor::FromInt64({2, -3, 1, 1}, {2, 2})},
                 {{"axis", Attribute::Int(1)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{3, 1, 5, 5}));
  r = RunOp("GatherND", X23(), {Tensor::FromInt64({1, 2, 0, 0}, {2, 2})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{6, 1}));
  // batch_dims=1: row b picks its own column.
  r = RunOp("GatherND", X23(), {Tensor::FromInt64({2, 0}, {2, 1})},
            {{"batch_dims", Attribute::Int(1)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{2}));
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{3, 4}));
}

TEST(Scatter, ElementsWithReductions) {
  Tensor idx = Tensor::FromInt64({1, 1}, {1, 2});
  Tensor upd = Tensor::FromFloat({10, 20}, {1, 2});
  auto r = RunOp("ScatterElements", X23(), {idx, upd},
                 {{"axis", Attribute::Int(1)}, {"reduction", Attribute::String("add")}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{1, 32, 3, 4, 5, 6}));
  r = RunOp("ScatterElements", X23(), {idx, upd}, {{"axis", Attribute::Int(1)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{1, 20, 3, 4, 5, 6}));  // last write wins
  r = RunOp("ScatterElements", X23(), {idx, upd}, {{"reduction", Attribute::String("avg")}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
}

TEST(Scatter, NDSlicesWithMax) {
  Tensor idx = Tensor::FromInt64({1, -2}, {2, 1});
  Tensor upd = Tensor::FromFloat({0, 9, 0, 7, 0, 7}, {2, 3});
  auto r = RunOp("ScatterND", X23(), {idx, upd}, {{"reduction", Attribute::String("max")}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{7, 2, 7, 4, 9, 6}));
  // updates of the wrong shape are rejected, not read out of bounds.
  r = RunOp("ScatterND", X23(), {idx, Tensor::FromFloat({1, 2}, {2, 1})});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IndexingShape, SymbolicAndRuntimeSizes) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("N"), 5, 6});
  Value* idx = b.Input("idx", DType::kInt64, {2, 3});
  Value* k = b.Input("k", DType::kInt64, {1});
  Value* depth = b.Input("depth", DType::kInt64, {});
  Value* vals = b.Constant("vals", Tensor::FromInt64({0, 1}, {2}));
  Value* gather = b.Op("Gather", {x, idx}, {{"axis", Attribute::Int(1)}});
  Value* gnd = b.Op("GatherND", {x, idx});
  std::vector<Value*> topk = b.OpN("TopK", {x, k}, 2);
  Value* onehot = b.Op("OneHot", {idx, depth, vals});
  auto g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  EXPECT_EQ(*gather->shape, (Shape{Dim::Symbol("N"), 2, 3, 6}));
  EXPECT_EQ(*gnd->shape, (Shape{2}));
  EXPECT_EQ(*topk[0]->shape, (Shape{Dim::Symbol("N"), 5, Dim()}));
  EXPECT_EQ(topk[1]->dtype, DType::kInt64);
  EXPECT_EQ(*onehot->shape, (Shape{2, 3, Dim()}));
  EXPECT_EQ(onehot->dtype, DType::kInt64);
}

// --- OneHot, Trilu, EyeLike, Range ---------------------------------------------------------

TEST(OneHot, NegativeAndOutOfRangeIndices) {
  Tensor idx = Tensor::FromInt64({-1, 5, 0}, {3});
  auto r = RunOp("OneHot", idx, {Tensor::FromFloat({3.0f}), Tensor::FromFloat({0, 1}, {2})},
                 {{"axis", Attribute::Int(0)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{3, 3}));
  // Columns are the indices (axis 0 is depth): -1 -> row 2, 5 -> nothing, 0 -> row 0.
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{0, 0, 1, 0, 0, 0, 1, 0, 0}));
}

TEST(Trilu, LowerAndUpperWithK) {
  Tensor x = Tensor::FromFloat({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  auto r = RunOp("Trilu", x, {Tensor::FromInt64({-1})}, {{"upper", Attribute::Int(0)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{0, 0, 0, 4, 0, 0, 7, 8, 0}));
  r = RunOp("Trilu", x, {Tensor::FromInt64({1})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{0, 2, 3, 0, 0, 6, 0, 0, 0}));
}

TEST(EyeLike, DTypeAndOffset) {
  auto r = RunOp("EyeLike", X23(), {},
                 {{"k", Attribute::Int(1)}, {"dtype", Attribute::Int(int64_t(DType::kInt32))}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dtype(), DType::kInt32);
  EXPECT_EQ((*r)[0].ToInt64Vector(), (std::vector<int64_t>{0, 1, 0, 0, 0, 1}));
  r = RunOp("EyeLike", X23(), {}, {{"k", Attribute::Int(int64_t{1} << 62)}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>(6, 0.0)));
}

TEST(Range, IntFloatAndErrors) {
  auto r =
      RunOp("Range", Tensor::FromInt64({10}), {Tensor::FromInt64({6}), Tensor::FromInt64({-3})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].ToInt64Vector(), (std::vector<int64_t>{10, 7}));
  r = RunOp("Range", Tensor::FromFloat({0.5f}),
            {Tensor::FromFloat({2.0f}), Tensor::FromFloat({0.5f})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Values((*r)[0]), (std::vector<double>{0.5, 1.0, 1.5}));
  r = RunOp("Range", Tensor::FromInt64({0}), {Tensor::FromInt64({5}), Tensor::FromInt64({0})});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = RunOp("Range", Tensor::FromInt64({std::numeric_limits<int64_t>::lowest()}),
            {Tensor::FromInt64({std::numeric_limits<int64_t>::max()}), Tensor::FromInt64({1})});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);  // too large, no crash
}

TEST(Range, ShapeIsStaticOnlyForConstantBounds) {
  GraphBuilder b;
  Value* limit = b.Input("limit", DType::kInt64, {});
  Value* s = b.Constant("s", Tensor::FromInt64({0}));
  Value* d = b.Constant("d", Tensor::FromInt64({2}));
  Value* l = b.Constant("l", Tensor::FromInt64({7}));
  Value* dynamic = b.Op("Range", {s, limit, d});
  Value* folded = b.Op("Range", {s, l, d});
  b.Output(dynamic);
  b.Output(folded);
  auto g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  EXPECT_EQ(*dynamic->shape, (Shape{Dim()}));
  ASSERT_TRUE(folded->constant.has_value());  // constant-folded through the kernel
  EXPECT_EQ(folded->constant->ToInt64Vector(), (std::vector<int64_t>{0, 2, 4, 6}));
}

}  // namespace
}  // namespace kiln
