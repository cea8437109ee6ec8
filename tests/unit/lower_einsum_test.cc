// lower_einsum tests: every equation exporters write for attention and batched products is
// run on the reference interpreter before and after the pass (random inputs) and must agree;
// the structure checks say what it became. Each refusal has a negative case: the Einsum
// stays and the graph still computes the same thing.
#include "compiler/passes/lower_einsum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <random>

#include "compiler/pipeline.h"
#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ir/kiln_ops.h"
#include "tests/unit/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::CountOps;

Tensor Random(DType dtype, const std::vector<int64_t>& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_int_distribution<int> small(-4, 4);
  Tensor t(dtype, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.SetDouble(i, IsFloatDType(dtype) ? normal(rng) : small(rng));
  }
  return t;
}

struct Case {
  std::string equation;
  std::vector<int64_t> a, b;
  DType dtype = DType::kFloat32;
  Shape a_decl = {}, b_decl = {};  // declared shapes when they differ from the fed ones
};

// gtest names a failing case by its equation, not its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << '"' << c.equation << '"'; }

std::unique_ptr<Graph> EinsumGraph(const Case& c) {
  GraphBuilder b;
  Value* x = b.Input("a", c.dtype, c.a_decl.empty() ? ToShape(c.a) : c.a_decl);
  Value* y = b.Input("b", c.dtype, c.b_decl.empty() ? ToShape(c.b) : c.b_decl);
  b.Output(b.Op("Einsum", {x, y}, {{"equation", Attribute::String(c.equation)}}));
  return b.Build();
}

ref::TensorMap Feeds(const Case& c) {
  return {{"a", Random(c.dtype, c.a, 1)}, {"b", Random(c.dtype, c.b, 2)}};
}

// Runs the pass and compares; returns its changed flag. Both graphs accumulate in double,
// so the results agree to float rounding.
bool LowerAndCompare(Graph& g, const ref::TensorMap& feeds) {
  return testing::RunPassAndCompare(g, LowerEinsum, feeds, {1e-5, 1e-5});
}

struct Lowered {
  Case c;
  int transposes, reshapes;  // what the lowering should need, no more
};

void PrintTo(const Lowered& p, std::ostream* os) { PrintTo(p.c, os); }

class LowerEinsumCases : public ::testing::TestWithParam<Lowered> {};

TEST_P(LowerEinsumCases, BecomesMatMulAndAgrees) {
  const Lowered& p = GetParam();
  auto g = EinsumGraph(p.c);
  EXPECT_TRUE(LowerAndCompare(*g, Feeds(p.c)));
  EXPECT_EQ(CountOps(*g, "Einsum"), 0);
  EXPECT_EQ(CountOps(*g, "MatMul"), 1);
  EXPECT_EQ(CountOps(*g, "Transpose"), p.transposes);
  EXPECT_EQ(CountOps(*g, "Reshape"), p.reshapes);
  EXPECT_EQ(g->outputs[0]->producer->outputs[0], g->outputs[0]);
}

INSTANTIATE_TEST_SUITE_P(
    Equations, LowerEinsumCases,
    ::testing::Values(
        // maxvit's attention: q k^T (k needs its last two dims swapped) and attn v (none).
        Lowered{{"B G H I D, B G H J D -> B G H I J", {2, 3, 4, 5, 6}, {2, 3, 4, 7, 6}}, 1, 0},
        Lowered{{"B G H I J, B G H J D -> B G H I D", {2, 3, 4, 5, 7}, {2, 3, 4, 7, 6}}, 0, 0},
        Lowered{{"bij,bjk->bik", {3, 4, 5}, {3, 5, 6}}, 0, 0},
        Lowered{{"ij,jk", {4, 5}, {5, 6}}, 0, 0},  // implicit output: ik
        Lowered{{"bhqd,bhkd->bhqk", {2, 3, 5, 4}, {2, 3, 6, 4}}, 1, 0},
        Lowered{{"i,i->", {7}, {7}}, 0, 3},  // dot: [1,K] x [K,1] -> [1,1] -> scalar
        Lowered{{"i,j->ij", {4}, {5}}, 0, 2},  // outer: [M,1] x [1,N], nothing contracted
        Lowered{{"...ij,...jk->...ik", {2, 3, 4, 5}, {2, 3, 5, 6}}, 0, 0},
        Lowered{{"...ij,...jk", {2, 4, 5}, {2, 5, 6}}, 0, 0},  // implicit: ellipsis first
        // An ellipsis in one operand only: its dims are left-free, flattened into M.
        Lowered{{"...ij,jk->...ik", {2, 3, 4, 5}, {5, 6}}, 0, 2},
        // Every group non-empty and every operand out of order.
        Lowered{{"abcd,cbde->eab", {2, 3, 4, 5}, {4, 3, 5, 6}}, 3, 2},
        Lowered{{"ik,kj->ji", {4, 5}, {5, 6}}, 1, 0},
        // Permutations that are not their own inverse (a 3-cycle in, a 4-cycle out).
        Lowered{{"jbi,bjk->bik", {5, 3, 4}, {3, 5, 6}}, 1, 0},
        Lowered{{"ijk,kl->jlik", {2, 3, 4}, {4, 5}}, 2, 3},
        Lowered{{"bmk,bkn->bmn", {1, 1, 5}, {1, 5, 1}}, 0, 0},  // size-1 dims
        Lowered{{"bij,bjk->bik", {3, 4, 5}, {3, 5, 6}, DType::kFloat64}, 0, 0}));

// The Einsum's output is a graph output and has another reader: the value keeps its name
// and its producer is now the MatMul (here the last op).
TEST(LowerEinsum, KeepsOutputValueWithAnotherReader) {
  GraphBuilder b;
  Value* x = b.Input("a", DType::kFloat32, {3, 4});
  Value* y = b.Input("b", DType::kFloat32, {4, 5});
  Value* e = b.Op("Einsum", {x, y}, {{"equation", Attribute::String("ij,jk->ik")}});
  b.Output(e);
  b.Output(b.Op("Relu", {e}));
  auto g = b.Build();
  const std::string name = e->name;
  EXPECT_TRUE(LowerAndCompare(
      *g, {{"a", Random(DType::kFloat32, {3, 4}, 3)}, {"b", Random(DType::kFloat32, {4, 5}, 4)}}));
  EXPECT_EQ(g->outputs[0]->name, name);
  EXPECT_EQ(g->outputs[0]->producer->op_type, "MatMul");
}

class LeavesEinsum : public ::testing::TestWithParam<Case> {};

TEST_P(LeavesEinsum, KeepsNodeAndResults) {
  const Case& c = GetParam();
  auto g = EinsumGraph(c);
  EXPECT_FALSE(LowerAndCompare(*g, Feeds(c)));
  EXPECT_EQ(CountOps(*g, "Einsum"), 1);
  EXPECT_EQ(CountOps(*g, "MatMul"), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Refusals, LeavesEinsum,
    ::testing::Values(
        Case{"iij,jk->ik", {3, 3, 4}, {4, 5}},          // diagonal
        Case{"ij,jk->i", {3, 4}, {4, 5}},               // k summed in one operand
        Case{"bij,bjk->bik", {1, 3, 4}, {2, 4, 5}},     // b broadcasts 1 -> 2
        Case{"...ij,...jk->...ik", {1, 3, 4}, {2, 3, 4, 5}},  // ellipsis dims broadcast
        Case{"ij,jk->ik", {3, 4}, {4, 5}, DType::kInt32},      // integer
        Case{"ij,jk->ik", {3, 4}, {4, 5}, DType::kFloat32, {Dim::Symbol("n"), 4}},  // dynamic
        Case{"ij,jk->ik", {0, 4}, {4, 5}}));                   // zero-sized dim

TEST(LowerEinsum, LeavesOneAndThreeOperands) {
  GraphBuilder b;
  Value* x = b.Input("a", DType::kFloat32, {3, 4});
  Value* y = b.Input("b", DType::kFloat32, {4, 5});
  Value* z = b.Input("c", DType::kFloat32, {5, 2});
  b.Output(b.Op("Einsum", {x}, {{"equation", Attribute::String("ij->ji")}}));
  b.Output(b.Op("Einsum", {x, y, z}, {{"equation", Attribute::String("ij,jk,kl->il")}}));
  auto g = b.Build();
  EXPECT_FALSE(LowerAndCompare(*g, {{"a", Random(DType::kFloat32, {3, 4}, 5)},
                                    {"b", Random(DType::kFloat32, {4, 5}, 6)},
                                    {"c", Random(DType::kFloat32, {5, 2}, 7)}}));
  EXPECT_EQ(CountOps(*g, "Einsum"), 2);
}

// In the pipeline: at O1 the Einsum is a MatMul; at O2 the bias Add after it fuses into it.
TEST(LowerEinsum, PipelineLowersBeforeEpilogueFusion) {
  for (OptLevel level : {OptLevel::kO1, OptLevel::kO2}) {
    const std::vector<std::string> names = PipelinePasses(level);
    auto at = [&names](const char* n) { return std::find(names.begin(), names.end(), n); };
    ASSERT_NE(at("lower_einsum"), names.end());
    if (level == OptLevel::kO2) {
      EXPECT_LT(at("lower_einsum"), at("fuse_matmul_epilogue"));
    }
    GraphBuilder b;
    Value* x = b.Input("a", DType::kFloat32, {2, 3, 4});
    Value* y = b.Input("b", DType::kFloat32, {2, 5, 4});
    Value* e = b.Op("Einsum", {x, y}, {{"equation", Attribute::String("bqd,bkd->bqk")}});
    b.Output(b.Op("Add", {e, b.Constant("bias", Random(DType::kFloat32, {5}, 8))}));
    auto g = b.Build();
    PipelineOptions o;
    o.level = level;
    auto run = [&o](Graph& graph) -> absl::StatusOr<bool> {
      RETURN_IF_ERROR(RunPipeline(graph, o).status());
      return true;
    };
    EXPECT_TRUE(testing::RunPassAndCompare(*g, run,
                                           {{"a", Random(DType::kFloat32, {2, 3, 4}, 9)},
                                            {"b", Random(DType::kFloat32, {2, 5, 4}, 10)}},
                                           {1e-5, 1e-5}));
    EXPECT_EQ(CountOps(*g, "Einsum"), 0);
    const bool fused = level == OptLevel::kO2;
    EXPECT_EQ(CountOps(*g, kiln_ops::kFusedMatMul), fused ? 1 : 0);
    EXPECT_EQ(CountOps(*g, "MatMul"), fused ? 0 : 1);
  }
}

}  // namespace
}  // namespace kiln::passes
