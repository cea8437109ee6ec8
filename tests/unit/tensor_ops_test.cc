// Tensor, shape and layout operators: reference kernels (numbers, errors) and their shape
// rules (symbolic dims, constant folding of shape subgraphs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ops/interpreter.h"

namespace kiln {
namespace {

using Attrs = std::map<std::string, Attribute>;

std::vector<float> Floats(const Tensor& t) {
  std::vector<float> v;
  for (double d : t.ToDoubleVector()) v.push_back(static_cast<float>(d));
  return v;
}

Tensor Iota(std::vector<int64_t> shape, DType dtype = DType::kFloat32) {
  Tensor t(dtype, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, static_cast<double>(i));
  return t;
}

// Builds `op` over input "x" (fed `x`) and constant operands, runs it and returns output 0.
absl::StatusOr<Tensor> RunOp(const std::string& op, const Tensor& x,
                             const std::vector<std::optional<Tensor>>& operands,
                             Attrs attrs = {}, size_t num_outputs = 1, size_t which = 0) {
  GraphBuilder b;
  std::vector<Value*> ins{b.Input("x", x.dtype(), ToShape(x.shape()))};
  for (size_t i = 0; i < operands.size(); ++i) {
    ins.push_back(operands[i] ? b.Constant("c" + std::to_string(i), *operands[i]) : nullptr);
  }
  std::vector<Value*> outs = b.OpN(op, ins, num_outputs, std::move(attrs));
  for (Value* v : outs) b.Output(v);
  std::unique_ptr<Graph> g = b.Build();
  ASSIGN_OR_RETURN(ref::TensorMap result, ref::Run(*g, {{"x", x}}));
  return result.at(outs[which]->name);
}

TEST(TensorKernels, ReshapeCopiesZeroAndInfersMinusOne) {
  auto y = RunOp("Reshape", Iota({2, 3, 4}), {Tensor::FromInt64({0, -1})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(Floats(*y)[13], 13.0f);
}

TEST(TensorKernels, BadReshapeIsInvalidArgument) {
  auto y = RunOp("Reshape", Iota({2, 3}), {Tensor::FromInt64({4, -1})});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  y = RunOp("Reshape", Iota({2, 3}), {Tensor::FromInt64({-1, -1})});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorKernels, CastToStringIsUnimplemented) {
  auto y = RunOp("Cast", Iota({2}), {}, {{"to", Attribute::Int(static_cast<int>(DType::kString))}});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(y.status().message().find("Cast"), std::string::npos);
}

TEST(TensorKernels, CastFloatToIntTruncatesAndSaturates) {
  Tensor x = Tensor::FromFloat({-2.7f, 2.7f, 300.0f, NAN, -1e20f}, {5});
  auto y = RunOp("Cast", x, {}, {{"to", Attribute::Int(static_cast<int>(DType::kInt8))}});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->ToInt64Vector(), (std::vector<int64_t>{-2, 2, 127, 0, -128}));
  auto h = RunOp("Cast", x, {}, {{"to", Attribute::Int(static_cast<int>(DType::kFloat16))}});
  ASSERT_TRUE(h.ok());
  EXPECT_FLOAT_EQ(Floats(*h)[0], -2.69921875f);  // nearest half
}

TEST(TensorKernels, HostileSizesAreResourceExhausted) {
  Tensor big = Tensor::FromInt64({1 << 20, 1 << 20, 1 << 20});
  EXPECT_EQ(RunOp("Expand", Iota({1}), {big}).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RunOp("Tile", Iota({2}), {Tensor::FromInt64({int64_t{1} << 40})}).status().code(),
            absl::StatusCode::kResourceExhausted);
  GraphBuilder b;
  Value* s = b.Input("x", DType::kInt64, {3});
  b.Output(b.Op("ConstantOfShape", {s}));
  auto g = b.Build();
  EXPECT_EQ(ref::Run(*g, {{"x", big}}).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(TensorKernels, HostileOperandsFailCleanly) {
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  auto y = RunOp("Slice", Iota({4}),
                 {Tensor::FromInt64({kMax}, {1}), Tensor::FromInt64({kMin}, {1}),
                  Tensor::FromInt64({0}, {1}), Tensor::FromInt64({kMin}, {1})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Floats(*y), (std::vector<float>{3}));
  EXPECT_EQ(RunOp("Pad", Iota({2}), {Tensor::FromInt64({kMax, kMax})}).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RunOp("Split", Iota({4}), {Tensor::FromInt64({kMax, kMax, 2})}, {}, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunOp("Resize", Iota({1, 2}), {std::nullopt, Tensor::FromFloat({1e30f, 1e30f}, {2})})
                .status()
                .code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RunOp("Transpose", Iota({2, 3}), {}, {{"perm", Attribute::Ints({0, 0})}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorKernels, SliceNegativeStepAndClamping) {
  // x = [0..9]; starts 20 (clamped to 9), ends -100 (clamped to -1), step -3.
  auto y = RunOp("Slice", Iota({10}),
                 {Tensor::FromInt64({20}), Tensor::FromInt64({-100}), Tensor::FromInt64({0}),
                  Tensor::FromInt64({-3})});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Floats(*y), (std::vector<float>{9, 6, 3, 0}));
}

TEST(TensorKernels, SplitUnevenWithNumOutputs) {
  for (size_t k = 0; k < 3; ++k) {
    auto y = RunOp("Split", Iota({7}), {}, {{"num_outputs", Attribute::Int(3)}}, 3, k);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(y->dim(0), k < 2 ? 3 : 1);
    EXPECT_EQ(Floats(*y)[0], 3.0f * k);
  }
}

TEST(TensorKernels, PadReflectAndEdgeIntegers) {
  Tensor x = Iota({3}, DType::kInt32);  // [0, 1, 2]
  auto r = RunOp("Pad", x, {Tensor::FromInt64({2, 3})}, {{"mode", Attribute::String("reflect")}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->ToInt64Vector(), (std::vector<int64_t>{2, 1, 0, 1, 2, 1, 0, 1}));
  auto e = RunOp("Pad", x, {Tensor::FromInt64({1, -1})}, {{"mode", Attribute::String("edge")}});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->ToInt64Vector(), (std::vector<int64_t>{0, 0, 1}));
}

TEST(TensorKernels, TransposeDefaultReversesAnyDType) {
  auto y = RunOp("Transpose", Iota({2, 3}, DType::kUInt16), {});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(y->ToInt64Vector(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
}

// Every permutation of a [3, 17, 33, 2] tensor (the last-two swap goes in 16 x 16 tiles, with
// sizes that are not whole tiles; the others row by row) against the index formula, in each
// element size.
TEST(TensorKernels, TransposeEveryPermutationAndElementSize) {
  const std::vector<int64_t> shape = {3, 17, 33, 2};
  for (DType dt : {DType::kUInt8, DType::kInt16, DType::kFloat32, DType::kInt64}) {
    const Tensor x = Iota(shape, dt);
    std::vector<int64_t> perm = {0, 1, 2, 3};
    do {
      auto y = RunOp("Transpose", x, {}, {{"perm", Attribute::Ints(perm)}});
      ASSERT_TRUE(y.ok()) << y.status();
      std::vector<int64_t> out(4), idx(4, 0);
      for (int d = 0; d < 4; ++d) out[d] = shape[perm[d]];
      ASSERT_EQ(y->shape(), out);
      const std::vector<int64_t> st = {17 * 33 * 2, 33 * 2, 2, 1};
      for (int64_t i = 0; i < y->numel(); ++i) {
        int64_t src = 0;
        for (int d = 0; d < 4; ++d) src += idx[d] * st[perm[d]];
        ASSERT_EQ(y->GetInt(i), x.GetInt(src)) << "perm " << perm[0] << perm[1] << perm[2] << perm[3];
        for (int d = 3; d >= 0 && ++idx[d] == out[d]; --d) idx[d] = 0;
      }
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
}

TEST(TensorKernels, DepthToSpaceModes) {
  Tensor x = Iota({1, 4, 1, 1});
  auto dcr = RunOp("DepthToSpace", x, {}, {{"blocksize", Attribute::Int(2)}});
  auto crd = RunOp("DepthToSpace", x, {},
                   {{"blocksize", Attribute::Int(2)}, {"mode", Attribute::String("CRD")}});
  ASSERT_TRUE(dcr.ok() && crd.ok());
  EXPECT_EQ(Floats(*dcr), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(Floats(*crd), (std::vector<float>{0, 1, 2, 3}));
  auto back = RunOp("SpaceToDepth", Iota({1, 1, 2, 2}), {}, {{"blocksize", Attribute::Int(2)}});
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->shape(), (std::vector<int64_t>{1, 4, 1, 1}));
}

TEST(TensorKernels, ResizeLinearHalfPixelAndNearest) {
  Tensor x = Tensor::FromFloat({0, 10}, {1, 2});
  auto lin = RunOp("Resize", x, {std::nullopt, Tensor::FromFloat({1, 2}, {2})},
                   {{"mode", Attribute::String("linear")}});
  ASSERT_TRUE(lin.ok()) << lin.status();
  EXPECT_EQ(Floats(*lin), (std::vector<float>{0, 2.5f, 7.5f, 10}));
  auto near = RunOp("Resize", Iota({1, 2}, DType::kInt64),
                    {std::nullopt, std::nullopt, Tensor::FromInt64({1, 4})});
  ASSERT_TRUE(near.ok()) << near.status();
  EXPECT_EQ(near->ToInt64Vector(), (std::vector<int64_t>{0, 0, 1, 1}));
}

// Infers `g` and returns output 0's value.
const Value* InferOut(Graph& g) {
  absl::Status st = shape::InferShapes(g);
  EXPECT_TRUE(st.ok()) << st;
  return g.outputs[0];
}

TEST(TensorRules, SymbolicDimsPassThrough) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("N"), 3, 4});
  Value* r = b.Op("Reshape", {x, b.Constant("s", Tensor::FromInt64({0, -1}))});
  Value* t = b.Op("Transpose", {r});
  Value* u = b.Op("Unsqueeze", {t, b.Constant("a", Tensor::FromInt64({0}))});
  b.Output(u);
  auto g = b.Build();
  const Value* out = InferOut(*g);
  ASSERT_TRUE(out->shape);
  EXPECT_EQ(ShapeToString(*out->shape), "[1,12,N]");
}

TEST(TensorRules, ReshapeMinusOneRecoversSymbol) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("N"), 3, 4});
  b.Output(b.Op("Reshape", {x, b.Constant("s", Tensor::FromInt64({-1, 12}))}));
  auto g = b.Build();
  EXPECT_EQ(ShapeToString(*InferOut(*g)->shape), "[N,12]");
}

TEST(TensorRules, BadReshapeFailsInference) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3});
  b.Output(b.Op("Reshape", {x, b.Constant("s", Tensor::FromInt64({4, 2}))}));
  auto g = b.Build();
  EXPECT_EQ(shape::InferShapes(*g).code(), absl::StatusCode::kInvalidArgument);
}

// PyTorch's flatten: Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])).
std::unique_ptr<Graph> ShapeSubgraph(bool with_gather) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("N"), 3, 4});
  Value* shape = b.Op("Shape", {x});
  Value* batch;
  if (with_gather) {
    Value* g = b.Op("Gather", {shape, b.Constant("i", Tensor::FromInt64({0}, {}))});
    batch = b.Op("Unsqueeze", {g, b.Constant("a", Tensor::FromInt64({0}))});
  } else {
    batch = b.Op("Slice", {shape, b.Constant("st", Tensor::FromInt64({0}, {1})),
                           b.Constant("en", Tensor::FromInt64({1}, {1}))});
  }
  Value* target = b.Op("Concat", {batch, b.Constant("m", Tensor::FromInt64({-1}, {1}))},
                       {{"axis", Attribute::Int(0)}});
  b.Output(b.Op("Reshape", {x, target}));
  return b.Build();
}

void ExpectFoldsWhenStatic(bool with_gather) {
  auto g = ShapeSubgraph(with_gather);
  absl::Status inferred = shape::InferShapes(*g);
  ASSERT_TRUE(inferred.ok()) << inferred;
  EXPECT_GT(g->nodes().size(), 1u);  // symbolic batch: the shape is computed at run time
  absl::Status st = shape::Specialize(*g, 5);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(g->nodes().size(), 1u);  // only the Reshape is left
  EXPECT_EQ(g->nodes()[0]->op_type, "Reshape");
  EXPECT_TRUE(g->nodes()[0]->inputs[1]->is_constant());
  EXPECT_EQ(ShapeToString(*g->outputs[0]->shape), "[5,12]");
  auto out = ref::Run(*g, {{"x", Iota({5, 3, 4})}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->begin()->second.shape(), (std::vector<int64_t>{5, 12}));
}

TEST(TensorRules, ShapeSliceConcatReshapeFolds) { ExpectFoldsWhenStatic(false); }

TEST(TensorRules, ShapeGatherUnsqueezeConcatReshapeFolds) {
  if (!ref::KernelRegistry::Default().Find("", "Gather")) GTEST_SKIP() << "no Gather kernel yet";
  ExpectFoldsWhenStatic(true);
}

TEST(TensorRules, ShapeOfStaticSuffixIsConstant) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("N"), 3, 4});
  b.Output(b.Op("Shape", {x}, {{"start", Attribute::Int(1)}}));
  auto g = b.Build();
  const Value* out = InferOut(*g);
  ASSERT_TRUE(out->is_constant());
  EXPECT_EQ(out->constant->ToInt64Vector(), (std::vector<int64_t>{3, 4}));
}

TEST(TensorRules, ResizeAndSliceAndConcatShapes) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("N"), 3, 5, 7});
  Value* r = b.Op("Resize", {x, nullptr, b.Constant("sc", Tensor::FromFloat({1, 1, 2, 0.5f}))});
  Value* s = b.Op("Slice", {r, b.Constant("st", Tensor::FromInt64({-1})),
                            b.Constant("en", Tensor::FromInt64({-100})),
                            b.Constant("ax", Tensor::FromInt64({2})),
                            b.Constant("sp", Tensor::FromInt64({-2}))});
  Value* c = b.Op("Concat", {s, s}, {{"axis", Attribute::Int(1)}});
  b.Output(c);
  b.Output(r);
  auto g = b.Build();
  InferOut(*g);
  EXPECT_EQ(ShapeToString(*g->outputs[1]->shape), "[N,3,10,3]");
  EXPECT_EQ(ShapeToString(*g->outputs[0]->shape), "[N,6,5,3]");
}

}  // namespace
}  // namespace kiln
