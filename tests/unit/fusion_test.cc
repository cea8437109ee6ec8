// Epilogue fusion tests: structure (what was fused) and numbers (reference interpreter on the
// graph before and after).
#include <gtest/gtest.h>

#include <cmath>

#include "compiler/passes/fuse_conv_epilogue.h"
#include "compiler/passes/fuse_elementwise.h"
#include "compiler/passes/fuse_matmul_epilogue.h"
#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ir/kiln_ops.h"
#include "ir/verifier.h"
#include "ops/interpreter.h"
#include "tests/unit/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::CountOps;

// Fusions must not move any output by more than 1e-5.
template <class F>
bool FuseAndCompare(Graph& g, F pass, const ref::TensorMap& feeds) {
  return testing::RunPassAndCompare(g, pass, feeds, {1e-5, 0.0});
}

Tensor Ramp(std::vector<int64_t> shape, double scale, double offset) {
  Tensor t(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, std::sin(i * scale) + offset);
  return t;
}



struct ConvGraph {
  std::unique_ptr<Graph> graph;
  ref::TensorMap feeds;
};

// conv(x) + bias -> relu -> + r -> relu; with `skip_also_used`, the residual sum also feeds
// another consumer (a skip connection into the next block).
ConvGraph ResidualBlock(bool skip_also_used) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 2, 4, 4});
  Value* r = b.Input("r", DType::kFloat32, {1, 3, 4, 4});
  Value* w = b.Constant("w", Ramp({3, 2, 3, 3}, 0.7, 0.0));
  Value* conv = b.Op("Conv", {x, w}, {{"pads", Attribute::Ints({1, 1, 1, 1})}});
  Value* biased = b.Op("Add", {conv, b.Constant("bias", Ramp({3, 1, 1}, 1.3, 0.1))});
  Value* act = b.Op("Relu", {biased});
  Value* sum = b.Op("Add", {act, r});
  b.Output(b.Op("Relu", {sum}));
  if (skip_also_used) b.Output(b.Op("Mul", {sum, b.Constant("two", Tensor::Scalar(DType::kFloat32, 2))}));
  return {b.Build(), {{"x", Ramp({1, 2, 4, 4}, 0.3, -0.2)}, {"r", Ramp({1, 3, 4, 4}, 0.9, 0.0)}}};
}

TEST(FuseConvEpilogue, FusesBiasActivationResidualAndFinalActivation) {
  ConvGraph cg = ResidualBlock(false);
  EXPECT_TRUE(FuseAndCompare(*cg.graph, FuseConvEpilogue, cg.feeds));
  ASSERT_EQ(cg.graph->nodes().size(), 1u);
  const Node& f = *cg.graph->nodes()[0];
  EXPECT_EQ(f.op_type, kiln_ops::kFusedConv);
  std::vector<std::string> ops;
  for (const auto& s : kiln_ops::ReadEpilogue(f)) ops.push_back(s.op);
  EXPECT_EQ(ops, (std::vector<std::string>{"Relu", "Add", "Relu"}));
  EXPECT_TRUE(f.input(2) && f.input(2)->constant);  // the bias Add became the bias
}

TEST(FuseConvEpilogue, DoesNotSwallowResidualSumThatFeedsASkipConnection) {
  ConvGraph cg = ResidualBlock(true);
  EXPECT_TRUE(FuseAndCompare(*cg.graph, FuseConvEpilogue, cg.feeds));
  EXPECT_EQ(CountOps(*cg.graph, "Relu"), 1);  // the Relu after the shared sum stays
  EXPECT_EQ(CountOps(*cg.graph, "Mul"), 1);
  Node* fused = nullptr;
  for (const auto& n : cg.graph->nodes()) {
    if (n->op_type == kiln_ops::kFusedConv) fused = n.get();
  }
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(kiln_ops::ReadEpilogue(*fused).back().op, "Add");
}

TEST(FuseConvEpilogue, FusesSiluWrittenAsSigmoidTimesX) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 2, 4, 4});
  Value* conv = b.Op("Conv", {x, b.Constant("w", Ramp({2, 2, 1, 1}, 0.5, 0.0))});
  Value* sig = b.Op("Sigmoid", {conv});
  b.Output(b.Op("Mul", {conv, sig}));
  auto g = b.Build();
  EXPECT_TRUE(FuseAndCompare(*g, FuseConvEpilogue, {{"x", Ramp({1, 2, 4, 4}, 0.3, 0.0)}}));
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(kiln_ops::ReadEpilogue(*g->nodes()[0])[0].op, "SiLU");
}

TEST(FuseMatMulEpilogue, FusesBiasAndGelu) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3, 4});
  Value* mm = b.Op("MatMul", {x, b.Constant("w", Ramp({4, 5}, 0.4, 0.0))});
  Value* biased = b.Op("Add", {b.Constant("b", Ramp({5}, 0.8, 0.0)), mm});
  b.Output(b.Op("Gelu", {biased}));
  auto g = b.Build();
  EXPECT_TRUE(FuseAndCompare(*g, FuseMatMulEpilogue, {{"x", Ramp({2, 3, 4}, 0.2, 0.0)}}));
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->op_type, kiln_ops::kFusedMatMul);
}

TEST(FuseMatMulEpilogue, FusesGemmWithTransBAndClip) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {3, 4});
  Value* gemm = b.Op("Gemm", {x, b.Constant("w", Ramp({5, 4}, 0.4, 0.0)),
                              b.Constant("c", Ramp({5}, 0.6, 0.0))},
                     {{"transB", Attribute::Int(1)}, {"beta", Attribute::Float(0.5f)}});
  Value* biased = b.Op("Add", {gemm, b.Constant("b", Ramp({1, 5}, 0.8, 0.0))});
  b.Output(b.Op("Clip", {biased, b.Constant("lo", Tensor::Scalar(DType::kFloat32, 0)),
                         b.Constant("hi", Tensor::Scalar(DType::kFloat32, 0.5))}));
  auto g = b.Build();
  EXPECT_TRUE(FuseAndCompare(*g, FuseMatMulEpilogue, {{"x", Ramp({3, 4}, 0.2, 0.0)}}));
  ASSERT_EQ(g->nodes().size(), 1u);
}

TEST(FuseMatMulEpilogue, DoesNotFoldFullMatrixConstantAsBias) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {3, 4});
  Value* mm = b.Op("MatMul", {x, b.Constant("w", Ramp({4, 5}, 0.4, 0.0))});
  b.Output(b.Op("Add", {mm, b.Constant("m", Ramp({3, 5}, 0.8, 0.0))}));
  auto g = b.Build();
  EXPECT_FALSE(FuseAndCompare(*g, FuseMatMulEpilogue, {{"x", Ramp({3, 4}, 0.2, 0.0)}}));
  EXPECT_EQ(CountOps(*g, "MatMul"), 1);
  EXPECT_EQ(CountOps(*g, "Add"), 1);
}

TEST(FuseMatMulEpilogue, DoesNotFuseWhenMatMulOutputHasTwoConsumers) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {3, 4});
  Value* mm = b.Op("MatMul", {x, b.Constant("w", Ramp({4, 5}, 0.4, 0.0))});
  b.Output(b.Op("Relu", {mm}));
  b.Output(b.Op("Tanh", {mm}));
  auto g = b.Build();
  EXPECT_FALSE(FuseAndCompare(*g, FuseMatMulEpilogue, {{"x", Ramp({3, 4}, 0.2, 0.0)}}));
}

TEST(FuseElementwise, FusesBroadcastingChainIntoOneProgram) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3});
  Value* y = b.Input("y", DType::kFloat32, {3});
  Value* m = b.Op("Mul", {x, y});
  Value* a = b.Op("Add", {m, b.Constant("one", Tensor::Scalar(DType::kFloat32, 1))});
  Value* l = b.Op("LeakyRelu", {a}, {{"alpha", Attribute::Float(0.3f)}});
  b.Output(b.Op("Sigmoid", {l}));
  auto g = b.Build();
  EXPECT_TRUE(FuseAndCompare(*g, FuseElementwise,
                             {{"x", Ramp({2, 3}, 0.7, -0.5)}, {"y", Ramp({3}, 1.1, 0.0)}}));
  ASSERT_EQ(g->nodes().size(), 1u);
  auto program = kiln_ops::ReadProgram(*g->nodes()[0]);
  ASSERT_TRUE(program.ok());
  EXPECT_EQ(program->instructions.size(), 4u);
  EXPECT_EQ(program->instructions[2].attrs.at("alpha").f, 0.3f);
}

TEST(FuseElementwise, DoesNotHideValueUsedOutsideTheGroup) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3});
  Value* e = b.Op("Exp", {x});
  Value* n = b.Op("Neg", {e});
  b.Output(b.Op("Relu", {n}));
  b.Output(b.Op("ReduceSum", {e}));  // e is needed outside: Exp stays its own node
  auto g = b.Build();
  EXPECT_TRUE(FuseAndCompare(*g, FuseElementwise, {{"x", Ramp({2, 3}, 0.7, -0.5)}}));
  EXPECT_EQ(CountOps(*g, "Exp"), 1);
  EXPECT_EQ(CountOps(*g, kiln_ops::kFusedElementwise), 1);
}

TEST(FuseElementwise, LeavesSingleOperatorsAlone) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3});
  b.Output(b.Op("Relu", {b.Op("MatMul", {x, b.Constant("w", Ramp({3, 3}, 0.1, 0.0))})}));
  auto g = b.Build();
  EXPECT_FALSE(FuseAndCompare(*g, FuseElementwise, {{"x", Ramp({2, 3}, 0.7, -0.5)}}));
}

}  // namespace
}  // namespace kiln::passes
