// fold_repeat_into_matmul: grouped-query attention's products read the key/value heads
// themselves instead of their repeats (structure and the reference interpreter before and after),
// the CPU engine runs the rewritten products natively and matches the reference on the original
// graph, and the repeats the pass must leave stay.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler/compile.h"
#include "compiler/passes/eliminate_dead_code.h"
#include "compiler/passes/fold_repeat_into_matmul.h"
#include "compiler/passes/fold_transpose_into_matmul.h"
#include "ir/builder.h"
#include "ir/kiln_ops.h"
#include "ops/interpreter.h"
#include "runtime/cpu/cpu_engine.h"
#include "tests/unit/pass_test_util.h"
#include "tests/unit/test_tensors.h"

namespace kiln::passes {
namespace {

using testing::CountOps;
using testing::SineRamp;

Value* I64(GraphBuilder& b, const std::string& name, std::vector<int64_t> v) {
  Tensor t(DType::kInt64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.SetInt(static_cast<int64_t>(i), v[i]);
  return b.Constant(name, std::move(t));
}

// [B, G, T, D] -> Unsqueeze(axis) -> Expand(`wide`) -> Reshape(`merged`).
Value* Repeat(GraphBuilder& b, Value* t, const std::string& p, int64_t axis,
              std::vector<int64_t> wide, std::vector<int64_t> merged) {
  Value* u = b.Op("Unsqueeze", {t, I64(b, p + "axes", {axis})});
  Value* e = b.Op("Expand", {u, I64(b, p + "wide", std::move(wide))});
  return b.Op("Reshape", {e, I64(b, p + "merged", std::move(merged))});
}

// softmax(q @ repeat(k)^T) @ repeat(v): q [2, 8, S, 16], k and v [2, 2, 9, 16] (4 query heads
// per key/value head).
std::unique_ptr<Graph> GroupedAttention(int64_t s) {
  GraphBuilder b;
  Value* q = b.Input("q", DType::kFloat32, {2, 8, s, 16});
  Value* k = b.Input("k", DType::kFloat32, {2, 2, 9, 16});
  Value* v = b.Input("v", DType::kFloat32, {2, 2, 9, 16});
  Value* kr = Repeat(b, k, "k", 2, {2, 2, 4, 9, 16}, {2, 8, 9, 16});
  Value* vr = Repeat(b, v, "v", 2, {2, 2, 4, 9, 16}, {0, 8, -1, 16});
  Value* kt = b.Op("Transpose", {kr}, {{"perm", Attribute::Ints({0, 1, 3, 2})}});
  Value* p = b.Op("Softmax", {b.Op("MatMul", {q, kt})}, {{"axis", Attribute::Int(-1)}});
  b.Output(b.Op("MatMul", {p, vr}));
  return b.Build();
}

ref::TensorMap Feeds(int64_t s) {
  return {{"q", SineRamp({2, 8, s, 16}, 0.3, 0.1)},
          {"k", SineRamp({2, 2, 9, 16}, 0.17, -0.2)},
          {"v", SineRamp({2, 2, 9, 16}, 0.23, 0.4)}};
}

absl::StatusOr<bool> TransposeRepeatClean(Graph& g) {
  RETURN_IF_ERROR(FoldTransposeIntoMatMul(g).status());
  ASSIGN_OR_RETURN(bool changed, FoldRepeatIntoMatMul(g));
  RETURN_IF_ERROR(EliminateDeadCode(g).status());
  return changed;
}

TEST(FoldRepeatIntoMatMul, GroupedAttentionReadsTheKeyValueHeadsThemselves) {
  for (int64_t s : {1, 3}) {
    SCOPED_TRACE(s);
    std::unique_ptr<Graph> g = GroupedAttention(s);
    EXPECT_TRUE(testing::RunPassAndCompare(*g, TransposeRepeatClean, Feeds(s)));
    EXPECT_EQ(CountOps(*g, "Expand"), 0);
    // Both products read k and v themselves, with 4 * s rows per key/value head.
    std::vector<std::string> read;
    for (const auto& n : g->nodes()) {
      if (n->op_type != "MatMul" && n->op_type != kiln_ops::kFusedMatMul) continue;
      read.push_back(n->input(1)->name);
      EXPECT_EQ(*n->output(0)->shape, ToShape({2, 2, 4 * s, n->input(1)->name == "k" ? 9 : 16}));
    }
    EXPECT_EQ(read, (std::vector<std::string>{"k", "v"}));
  }
}

TEST(FoldRepeatIntoMatMul, TheCpuEngineRunsTheStackedProductsAndMatchesTheOriginal) {
  for (int64_t s : {1, 5}) {
    SCOPED_TRACE(s);
    std::unique_ptr<Graph> g = GroupedAttention(s);
    CompileOptions co;
    co.pipeline.level = OptLevel::kO2;
    absl::StatusOr<CompiledGraph> c = CompileGraph(*g, co);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(CountOps(*c->graph, "Expand"), 0);
    absl::StatusOr<std::unique_ptr<runtime::Engine>> e = cpu::BuildCpuEngine(*c, {});
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ((*e)->info().fallback_ops, 0);
    const ref::TensorMap feeds = Feeds(s);
    absl::StatusOr<ref::TensorMap> want = ref::Run(*g, feeds);
    ASSERT_TRUE(want.ok()) << want.status();
    std::vector<Tensor> ins, outs;
    for (const auto& spec : (*e)->inputs()) ins.push_back(feeds.at(spec.name));
    ASSERT_TRUE((*e)->Run(ins, outs).ok());
    const Tensor& w = want->begin()->second;
    ASSERT_EQ(outs[0].shape(), w.shape());
    for (int64_t i = 0; i < w.numel(); ++i) {
      ASSERT_NEAR(outs[0].GetDouble(i), w.GetDouble(i), 1e-5 + 1e-4 * std::abs(w.GetDouble(i)))
          << "element " << i;
    }
  }
}

TEST(FoldRepeatIntoMatMul, LeavesRepeatsItCannotStack) {
  GraphBuilder b;
  Value* q = b.Input("q", DType::kFloat32, {2, 8, 1, 16});
  Value* p = b.Input("p", DType::kFloat32, {2, 2, 4, 36});
  Value* k = b.Input("k", DType::kFloat32, {2, 1, 9, 16});
  Value* v = b.Input("v", DType::kFloat32, {2, 2, 9, 16});
  // The Expand widens the head axis too ([2, 1, ..] -> [2, 2, 4, ..]).
  Value* kr = Repeat(b, k, "k", 2, {2, 2, 4, 9, 16}, {2, 8, 9, 16});
  b.Output(b.Op("MatMul", {q, b.Op("Transpose", {kr}, {{"perm", Attribute::Ints({0, 1, 3, 2})}})}));
  // The Reshape merges the repeat with the positions, not with the heads.
  Value* vr = Repeat(b, v, "v", 2, {2, 2, 4, 9, 16}, {2, 2, 36, 16});
  b.Output(b.Op("MatMul", {p, vr}));
  // The repeat as the A operand: A's groups cannot stack.
  Value* w = b.Input("w", DType::kFloat32, {2, 8, 16, 3});
  b.Output(b.Op("MatMul", {Repeat(b, v, "a", 2, {2, 2, 4, 9, 16}, {2, 8, 9, 16}), w}));
  std::unique_ptr<Graph> g = b.Build();
  const ref::TensorMap feeds = {{"q", SineRamp({2, 8, 1, 16}, 0.3, 0.1)},
                                {"w", SineRamp({2, 8, 16, 3}, 0.05, 0.2)},
                                {"p", SineRamp({2, 2, 4, 36}, 0.1, 0.0)},
                                {"k", SineRamp({2, 1, 9, 16}, 0.17, -0.2)},
                                {"v", SineRamp({2, 2, 9, 16}, 0.23, 0.4)}};
  EXPECT_FALSE(testing::RunPassAndCompare(*g, FoldRepeatIntoMatMul, feeds));
  EXPECT_EQ(CountOps(*g, "Expand"), 3);
}

TEST(FoldRepeatIntoMatMul, LeavesARepeatAlongTheMatrixAxes) {
  // Unsqueeze at axis 3 of [2, 2, 9, 16] repeats rows of the matrix: no batch broadcast.
  GraphBuilder b;
  Value* p = b.Input("p", DType::kFloat32, {2, 2, 5, 36});
  Value* v = b.Input("v", DType::kFloat32, {2, 2, 9, 16});
  Value* vr = Repeat(b, v, "v", 3, {2, 2, 9, 4, 16}, {2, 2, 36, 16});
  b.Output(b.Op("MatMul", {p, vr}));
  std::unique_ptr<Graph> g = b.Build();
  const ref::TensorMap feeds = {{"p", SineRamp({2, 2, 5, 36}, 0.1, 0.0)},
                                {"v", SineRamp({2, 2, 9, 16}, 0.23, 0.4)}};
  EXPECT_FALSE(testing::RunPassAndCompare(*g, FoldRepeatIntoMatMul, feeds));
  EXPECT_EQ(CountOps(*g, "Expand"), 1);
}

}  // namespace
}  // namespace kiln::passes
