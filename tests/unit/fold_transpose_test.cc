// fold_transpose_into_matmul: which Transposes move into a product's transA/transB
// (structure), that the graph still computes the same (the reference interpreter before and
// after), and the Transposes it must leave.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler/passes/eliminate_dead_code.h"
#include "compiler/passes/fold_transpose_into_matmul.h"
#include "ir/builder.h"
#include "ir/kiln_ops.h"
#include "tests/unit/pass_test_util.h"
#include "tests/unit/test_tensors.h"

namespace kiln::passes {
namespace {

using testing::CountOps;
using testing::FindOp;
using testing::SineRamp;

Attribute Perm(std::vector<int64_t> p) { return Attribute::Ints(std::move(p)); }

// The pass, then dead code (the Transposes it bypassed go).
absl::StatusOr<bool> FoldThenClean(Graph& g) {
  absl::StatusOr<bool> changed = FoldTransposeIntoMatMul(g);
  if (!changed.ok()) return changed;
  absl::StatusOr<bool> dce = EliminateDeadCode(g);
  if (!dce.ok()) return dce.status();
  return *changed;
}

TEST(FoldTransposeIntoMatMul, AttentionScoresReadTheKeysTransposed) {
  // q [2, 3, 1, 8] @ Transpose(k [2, 3, 7, 8], [0, 1, 3, 2]): one step's scores over a cache.
  GraphBuilder b;
  Value* q = b.Input("q", DType::kFloat32, {2, 3, 1, 8});
  Value* k = b.Input("k", DType::kFloat32, {2, 3, 7, 8});
  b.Output(b.Op("MatMul", {q, b.Op("Transpose", {k}, {{"perm", Perm({0, 1, 3, 2})}})}));
  std::unique_ptr<Graph> g = b.Build();
  const ref::TensorMap feeds = {{"q", SineRamp({2, 3, 1, 8}, 0.3, 0.1)}, {"k", SineRamp({2, 3, 7, 8}, 0.17, -0.2)}};
  EXPECT_TRUE(testing::RunPassAndCompare(*g, FoldThenClean, feeds));
  EXPECT_EQ(CountOps(*g, "Transpose"), 0);
  const Node* mm = FindOp(*g, kiln_ops::kFusedMatMul);
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->domain, kKilnDomain);
  EXPECT_EQ(mm->GetInt("transB", 0), 1);
  EXPECT_EQ(mm->GetInt("transA", 0), 0);
  EXPECT_EQ(mm->input(1)->name, "k");
}

TEST(FoldTransposeIntoMatMul, BothOperandsAndDefaultPermOn2D) {
  // Transpose with no perm reverses the dims: on a matrix that is the swap.
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {5, 4});
  Value* w = b.Input("w", DType::kFloat32, {6, 5});
  b.Output(b.Op("MatMul", {b.Op("Transpose", {x}), b.Op("Transpose", {w})}));  // x^T @ w^T
  std::unique_ptr<Graph> g = b.Build();
  const ref::TensorMap feeds = {{"x", SineRamp({5, 4}, 0.3, 0.0)}, {"w", SineRamp({6, 5}, 0.21, 0.3)}};
  EXPECT_TRUE(testing::RunPassAndCompare(*g, FoldThenClean, feeds));
  const Node* mm = FindOp(*g, kiln_ops::kFusedMatMul);
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->GetInt("transA", 0), 1);
  EXPECT_EQ(mm->GetInt("transB", 0), 1);
  EXPECT_EQ(mm->input(0)->name, "x");
  EXPECT_EQ(mm->input(1)->name, "w");
  EXPECT_EQ(CountOps(*g, "Transpose"), 0);
}

TEST(FoldTransposeIntoMatMul, AFusedMatMulsFlagFlips) {
  // A Gemm-shaped FusedMatMul already reading B transposed: a Transpose before it cancels.
  GraphBuilder b;
  Value* a = b.Input("a", DType::kFloat32, {3, 4});
  Value* w = b.Input("w", DType::kFloat32, {4, 5});
  Value* c = b.Constant("c", SineRamp({5}, 0.4, 0.0));
  Value* wt = b.Op("Transpose", {w}, {{"perm", Perm({1, 0})}});
  Value* y = b.Op(kiln_ops::kFusedMatMul, {a, wt, c}, {{"transB", Attribute::Int(1)}, {"beta", Attribute::Float(0.5f)}},
                  kKilnDomain);
  kiln_ops::WriteEpilogue(*y->producer, {{"Relu"}});
  b.Output(y);
  std::unique_ptr<Graph> g = b.Build();
  const ref::TensorMap feeds = {{"a", SineRamp({3, 4}, 0.3, 0.0)}, {"w", SineRamp({4, 5}, 0.7, 0.1)}};
  EXPECT_TRUE(testing::RunPassAndCompare(*g, FoldThenClean, feeds));
  const Node* mm = FindOp(*g, kiln_ops::kFusedMatMul);
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->GetInt("transB", 1), 0);
  EXPECT_EQ(kiln_ops::ReadEpilogue(*mm).size(), 1u);
}

TEST(FoldTransposeIntoMatMul, LeavesOtherPermutationsGemmAndSharedTransposes) {
  GraphBuilder b;
  Value* q = b.Input("q", DType::kFloat32, {2, 3, 1, 8});
  Value* k = b.Input("k", DType::kFloat32, {2, 8, 3, 7});
  Value* x = b.Input("x", DType::kFloat32, {3, 4});
  Value* w = b.Input("w", DType::kFloat32, {5, 4});
  // [0, 2, 1, 3] moves a batch dim: not a matrix transpose.
  b.Output(b.Op("MatMul", {q, b.Op("Transpose", {k}, {{"perm", Perm({0, 2, 1, 3})}})}));
  // Gemm is left to its own flags.
  b.Output(b.Op("Gemm", {x, b.Op("Transpose", {w})}));
  std::unique_ptr<Graph> g = b.Build();
  const ref::TensorMap feeds = {{"q", SineRamp({2, 3, 1, 8}, 0.3, 0.1)}, {"k", SineRamp({2, 8, 3, 7}, 0.11, 0.0)},
                                {"x", SineRamp({3, 4}, 0.5, 0.0)}, {"w", SineRamp({5, 4}, 0.2, 0.0)}};
  EXPECT_FALSE(testing::RunPassAndCompare(*g, FoldTransposeIntoMatMul, feeds));
  EXPECT_EQ(CountOps(*g, "Transpose"), 2);
  EXPECT_EQ(FindOp(*g, kiln_ops::kFusedMatMul), nullptr);

  // A Transpose that is also a graph output stays computed; the product still reads k.
  GraphBuilder s;
  Value* q2 = s.Input("q", DType::kFloat32, {3, 1, 8});
  Value* k2 = s.Input("k", DType::kFloat32, {3, 7, 8});
  Value* kt = s.Op("Transpose", {k2}, {{"perm", Perm({0, 2, 1})}});
  s.Output(kt);
  s.Output(s.Op("MatMul", {q2, kt}));
  std::unique_ptr<Graph> g2 = s.Build();
  const ref::TensorMap feeds2 = {{"q", SineRamp({3, 1, 8}, 0.3, 0.1)}, {"k", SineRamp({3, 7, 8}, 0.13, 0.0)}};
  EXPECT_TRUE(testing::RunPassAndCompare(*g2, FoldThenClean, feeds2));
  EXPECT_EQ(CountOps(*g2, "Transpose"), 1);
  EXPECT_EQ(FindOp(*g2, kiln_ops::kFusedMatMul)->input(1)->name, "k");
}

}  // namespace
}  // namespace kiln::passes
