// simplify_reshapes and fold_scale_into_weights tests: structure (what collapsed or folded)
// and numbers (the reference interpreter before and after), plus the cases each pass must
// leave alone.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler/passes/fold_scale_into_weights.h"
#include "compiler/passes/simplify_reshapes.h"
#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ir/verifier.h"
#include "ops/interpreter.h"
#include "tests/unit/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::CountOps;
using testing::FindOp;

// Folding may move outputs by rounding only: 1e-5 relative to their magnitude.
template <class F>
bool RunAndCompare(Graph& g, F pass, const ref::TensorMap& feeds) {
  return testing::RunPassAndCompare(g, pass, feeds, {1e-5, 1e-5});
}

Tensor Ramp(std::vector<int64_t> shape, double scale, double offset) {
  Tensor t(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, std::sin(i * scale) + offset);
  return t;
}




Value* Ints(GraphBuilder& b, std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return b.Constant("ints", Tensor::FromInt64(v, {n}));
}

// ---- simplify_reshapes: reshape chains ----------------------------------------------------

const ref::TensorMap kFeeds234 = {{"x", Ramp({2, 3, 4}, 0.3, 0.0)}};

// x [2,3,4] -> Flatten(axis=1) [2,12] -> Unsqueeze([1]) [2,1,12] -> Reshape([4,6]) -> Relu.
std::unique_ptr<Graph> ReshapeChain(bool flat_also_used, bool flat_is_output) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3, 4});
  Value* flat = b.Op("Flatten", {x}, {{"axis", Attribute::Int(1)}});
  Value* un = b.Op("Unsqueeze", {flat, Ints(b, {1})});
  Value* r = b.Op("Reshape", {un, Ints(b, {4, -1})});
  b.Output(b.Op("Relu", {r}));
  if (flat_also_used) b.Output(b.Op("Neg", {flat}));
  if (flat_is_output) b.Output(flat);
  return b.Build();
}

TEST(SimplifyReshapes, CollapsesFlattenUnsqueezeReshapeChainIntoOneViewReshape) {
  auto g = ReshapeChain(false, false);
  EXPECT_TRUE(RunAndCompare(*g, SimplifyReshapes, kFeeds234));
  EXPECT_EQ(g->nodes().size(), 2u);
  EXPECT_EQ(CountOps(*g, "Flatten") + CountOps(*g, "Unsqueeze"), 0);
  const Node* r = FindOp(*g, "Reshape");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->input(0)->name, "x");
  ASSERT_TRUE(r->input(1)->constant);
  EXPECT_EQ(r->input(1)->constant->ToInt64Vector(), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(r->GetInt("kiln_view", 0), 1);
}

TEST(SimplifyReshapes, DoesNotCollapseWhenIntermediateHasAnotherConsumer) {
  auto g = ReshapeChain(/*flat_also_used=*/true, false);
  EXPECT_TRUE(RunAndCompare(*g, SimplifyReshapes, kFeeds234));  // views are still marked
  EXPECT_EQ(CountOps(*g, "Flatten"), 1);
  // Unsqueeze -> Reshape still collapses: the Unsqueeze output had one reader.
  EXPECT_EQ(CountOps(*g, "Unsqueeze"), 0);
  EXPECT_EQ(FindOp(*g, "Reshape")->input(0), FindOp(*g, "Flatten")->output(0));
}

TEST(SimplifyReshapes, DoesNotCollapseAcrossAGraphOutput) {
  auto g = ReshapeChain(false, /*flat_is_output=*/true);
  EXPECT_TRUE(RunAndCompare(*g, SimplifyReshapes, kFeeds234));
  EXPECT_EQ(CountOps(*g, "Flatten"), 1);
  EXPECT_EQ(FindOp(*g, "Reshape")->input(0), FindOp(*g, "Flatten")->output(0));
}

TEST(SimplifyReshapes, DoesNotCollapseChainWithSymbolicShape) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("N"), 3, 4});
  Value* flat = b.Op("Flatten", {x}, {{"axis", Attribute::Int(1)}});
  b.Output(b.Op("Unsqueeze", {flat, Ints(b, {1})}));
  auto g = b.Build();
  EXPECT_TRUE(RunAndCompare(*g, SimplifyReshapes, kFeeds234));
  EXPECT_EQ(CountOps(*g, "Flatten"), 1);
  EXPECT_EQ(CountOps(*g, "Unsqueeze"), 1);
  EXPECT_EQ(CountOps(*g, "Reshape"), 0);
}

TEST(SimplifyReshapes, MarksViewsOnceAndIsIdempotent) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3, 4});
  b.Output(b.Op("Squeeze", {b.Op("Relu", {b.Op("Unsqueeze", {x, Ints(b, {0})})}), Ints(b, {0})}));
  auto g = b.Build();
  EXPECT_TRUE(RunAndCompare(*g, SimplifyReshapes, kFeeds234));
  EXPECT_EQ(FindOp(*g, "Unsqueeze")->GetInt("kiln_view", 0), 1);
  EXPECT_EQ(FindOp(*g, "Squeeze")->GetInt("kiln_view", 0), 1);
  EXPECT_FALSE(RunAndCompare(*g, SimplifyReshapes, kFeeds234));
}

// ---- simplify_reshapes: transposes --------------------------------------------------------

TEST(SimplifyReshapes, MergesTransposePairIntoComposedPermutation) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3, 4});
  Value* t1 = b.Op("Transpose", {x}, {{"perm", Attribute::Ints({0, 2, 1})}});   // [2,4,3]
  Value* t2 = b.Op("Transpose", {t1}, {{"perm", Attribute::Ints({1, 0, 2})}});  // [4,2,3]
  b.Output(b.Op("Relu", {t2}));
  auto g = b.Build();
  EXPECT_TRUE(RunAndCompare(*g, SimplifyReshapes, kFeeds234));
  ASSERT_EQ(CountOps(*g, "Transpose"), 1);
  EXPECT_EQ(FindOp(*g, "Transpose")->GetInts("perm"), (std::vector<int64_t>{2, 0, 1}));
}

TEST(SimplifyReshapes, RemovesInverseTransposeChainOfThree) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3, 4});
  Value* t = b.Op("Transpose", {x});  // default perm: reversed
  t = b.Op("Transpose", {t}, {{"perm", Attribute::Ints({1, 0, 2})}});
  t = b.Op("Transpose", {t}, {{"perm", Attribute::Ints({2, 0, 1})}});
  b.Output(b.Op("Relu", {t}));
  auto g = b.Build();
  EXPECT_TRUE(RunAndCompare(*g, SimplifyReshapes, kFeeds234));
  EXPECT_EQ(CountOps(*g, "Transpose"), 0);
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->input(0)->name, "x");
}

TEST(SimplifyReshapes, InverseTransposePairAtGraphOutputBecomesIdentity) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3, 4});
  Value* t1 = b.Op("Transpose", {x}, {{"perm", Attribute::Ints({1, 2, 0})}});
  b.Output(b.Op("Transpose", {t1}, {{"perm", Attribute::Ints({2, 0, 1})}}));
  auto g = b.Build();
  const std::string out_name = g->outputs[0]->name;
  EXPECT_TRUE(RunAndCompare(*g, SimplifyReshapes, kFeeds234));
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->op_type, "Identity");
  EXPECT_EQ(g->outputs[0]->name, out_name);
}

TEST(SimplifyReshapes, DoesNotMergeTransposeWhoseOutputHasAnotherConsumer) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3, 4});
  Value* t1 = b.Op("Transpose", {x}, {{"perm", Attribute::Ints({0, 2, 1})}});
  b.Output(b.Op("Transpose", {t1}, {{"perm", Attribute::Ints({0, 2, 1})}}));
  b.Output(b.Op("Relu", {t1}));
  auto g = b.Build();
  EXPECT_FALSE(RunAndCompare(*g, SimplifyReshapes, kFeeds234));
  EXPECT_EQ(CountOps(*g, "Transpose"), 2);
}

// ---- fold_scale_into_weights --------------------------------------------------------------

const ref::TensorMap kImage = {{"x", Ramp({1, 2, 4, 4}, 0.3, -0.2)}};

struct ConvOptions {
  bool bias = false;
  bool second_consumer = false;
  bool output_is_graph_output = false;
};

// Conv(x [1,2,4,4], W [3,2,3,3]) -> Mul([1,3,1,1]) -> Add([3,1,1]) -> Relu.
std::unique_ptr<Graph> ConvScaleShift(const ConvOptions& o) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 2, 4, 4});
  std::vector<Value*> in = {x, b.Constant("w", Ramp({3, 2, 3, 3}, 0.7, 0.0))};
  if (o.bias) in.push_back(b.Constant("b", Ramp({3}, 1.1, 0.2)));
  Value* conv = b.Op("Conv", in, {{"pads", Attribute::Ints({1, 1, 1, 1})}});
  Value* scaled = b.Op("Mul", {conv, b.Constant("s", Ramp({1, 3, 1, 1}, 1.3, 1.5))});
  Value* shifted = b.Op("Add", {b.Constant("t", Ramp({3, 1, 1}, 0.9, 0.0)), scaled});
  b.Output(b.Op("Relu", {shifted}));
  if (o.second_consumer) b.Output(b.Op("Neg", {conv}));
  if (o.output_is_graph_output) b.Output(conv);
  return b.Build();
}

TEST(FoldScaleIntoWeights, FoldsConvMulAndAddIntoWeightsAndNewBias) {
  auto g = ConvScaleShift({});
  EXPECT_TRUE(RunAndCompare(*g, FoldScaleIntoWeights, kImage));
  EXPECT_EQ(g->nodes().size(), 2u);
  EXPECT_EQ(CountOps(*g, "Mul") + CountOps(*g, "Add"), 0);
  const Node* conv = FindOp(*g, "Conv");
  ASSERT_NE(conv, nullptr);
  ASSERT_NE(conv->input(2), nullptr);
  EXPECT_EQ(conv->input(2)->constant->shape(), (std::vector<int64_t>{3}));
  EXPECT_NE(conv->input(1)->name, "w");  // new weights: the original may be shared
}

TEST(FoldScaleIntoWeights, FoldsDivAndSubIntoConvWithBias) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 2, 4, 4});
  Value* conv = b.Op("Conv", {x, b.Constant("w", Ramp({3, 2, 1, 1}, 0.7, 0.0)),
                              b.Constant("b", Ramp({3}, 1.1, 0.2))});
  Value* div = b.Op("Div", {conv, b.Constant("s", Ramp({3, 1, 1}, 1.3, 1.5))});
  b.Output(b.Op("Sub", {div, b.Constant("t", Tensor::Scalar(DType::kFloat32, 0.25))}));
  auto g = b.Build();
  EXPECT_TRUE(RunAndCompare(*g, FoldScaleIntoWeights, kImage));
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->op_type, "Conv");
}

TEST(FoldScaleIntoWeights, DoesNotFoldWhenConvOutputHasSecondConsumer) {
  auto g = ConvScaleShift({.second_consumer = true});
  EXPECT_FALSE(RunAndCompare(*g, FoldScaleIntoWeights, kImage));
  EXPECT_EQ(CountOps(*g, "Mul"), 1);
  EXPECT_EQ(CountOps(*g, "Add"), 1);
}

TEST(FoldScaleIntoWeights, DoesNotFoldWhenConvOutputIsAGraphOutput) {
  auto g = ConvScaleShift({.output_is_graph_output = true});
  EXPECT_FALSE(RunAndCompare(*g, FoldScaleIntoWeights, kImage));
  EXPECT_EQ(CountOps(*g, "Mul"), 1);
}

TEST(FoldScaleIntoWeights, DoesNotFoldConstantThatVariesAlongWidth) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 2, 4, 4});
  Value* conv = b.Op("Conv", {x, b.Constant("w", Ramp({3, 2, 1, 1}, 0.7, 0.0))});
  b.Output(b.Op("Mul", {conv, b.Constant("s", Ramp({1, 1, 1, 4}, 1.3, 1.5))}));
  auto g = b.Build();
  EXPECT_FALSE(RunAndCompare(*g, FoldScaleIntoWeights, kImage));
  EXPECT_EQ(CountOps(*g, "Mul"), 1);
}

TEST(FoldScaleIntoWeights, DoesNotFoldDivisionByAZeroChannel) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 2, 4, 4});
  Value* conv = b.Op("Conv", {x, b.Constant("w", Ramp({2, 2, 1, 1}, 0.7, 0.0))});
  b.Output(b.Op("Div", {conv, b.Constant("s", Tensor::FromFloat({2.0f, 0.0f}, {2, 1, 1}))}));
  auto g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  absl::StatusOr<bool> changed = FoldScaleIntoWeights(*g);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
}

TEST(FoldScaleIntoWeights, FoldsScalarAndRowVectorIntoGemmWithTransBAndBeta) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {3, 4});
  Value* gemm = b.Op(
      "Gemm", {x, b.Constant("w", Ramp({5, 4}, 0.4, 0.0)), b.Constant("c", Ramp({5}, 0.6, 0.0))},
      {{"transB", Attribute::Int(1)}, {"beta", Attribute::Float(0.5f)}});
  Value* scaled = b.Op("Mul", {b.Constant("s", Ramp({5}, 1.3, 1.5)), gemm});
  Value* doubled = b.Op("Mul", {scaled, b.Constant("two", Tensor::Scalar(DType::kFloat32, 2))});
  b.Output(b.Op("Add", {doubled, b.Constant("t", Ramp({1, 5}, 0.8, 0.0))}));
  auto g = b.Build();
  EXPECT_TRUE(RunAndCompare(*g, FoldScaleIntoWeights, {{"x", Ramp({3, 4}, 0.2, 0.0)}}));
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->GetFloat("beta", 0), 1.0f);
}

TEST(FoldScaleIntoWeights, FoldsMulIntoMatMulButLeavesTheAdd) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3, 4});
  Value* mm = b.Op("MatMul", {x, b.Constant("w", Ramp({4, 5}, 0.4, 0.0))});
  Value* scaled = b.Op("Mul", {mm, b.Constant("s", Ramp({5}, 1.3, 1.5))});
  b.Output(b.Op("Add", {scaled, b.Constant("t", Ramp({5}, 0.8, 0.0))}));
  auto g = b.Build();
  EXPECT_TRUE(RunAndCompare(*g, FoldScaleIntoWeights, {{"x", Ramp({2, 3, 4}, 0.2, 0.0)}}));
  EXPECT_EQ(CountOps(*g, "Mul"), 0);
  EXPECT_EQ(CountOps(*g, "Add"), 1);  // fuse_matmul_epilogue's to take
  EXPECT_EQ(CountOps(*g, "MatMul"), 1);
}

TEST(FoldScaleIntoWeights, DoesNotFoldWhenMatMulWeightsAreNotConstant) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {3, 4});
  Value* w = b.Input("w", DType::kFloat32, {4, 5});
  Value* mm = b.Op("MatMul", {x, w});
  b.Output(b.Op("Mul", {mm, b.Constant("s", Ramp({5}, 1.3, 1.5))}));
  auto g = b.Build();
  EXPECT_FALSE(RunAndCompare(*g, FoldScaleIntoWeights,
                             {{"x", Ramp({3, 4}, 0.2, 0.0)}, {"w", Ramp({4, 5}, 0.4, 0.0)}}));
  EXPECT_EQ(CountOps(*g, "Mul"), 1);
}

}  // namespace
}  // namespace kiln::passes
