// assign_precision: which products are marked for bfloat16 (structure; the reference ignores
// the mark, so the numbers cannot move), what it leaves, and the pipeline's precision option.
#include "compiler/passes/assign_precision.h"

#include <gtest/gtest.h>

#include <cmath>

#include "compiler/pipeline.h"
#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ir/kiln_ops.h"
#include "tests/unit/pass_test_util.h"

namespace kiln::passes {
namespace {

Tensor Wave(std::vector<int64_t> shape) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, std::sin(0.3 * i));
  return t;
}

std::string Mark(const Node& n) { return n.GetString(kiln_ops::kPrecisionAttr, ""); }

TEST(AssignPrecision, MarksWeightProductsOnly) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 4, 8});
  Value* k = b.Input("k", DType::kFloat32, {2, 8, 4});
  Value* h = b.Op("MatMul", {x, b.Constant("w", Wave({8, 8}))});           // weights: marked
  Value* s = b.Op("MatMul", {h, k});                                        // two activations
  Value* g = b.Op("Gemm", {b.Input("a", DType::kFloat32, {3, 8}), b.Constant("wg", Wave({8, 2}))});
  Value* v = b.Op("MatMul", {x, b.Constant("vec", Wave({8}))});             // a vector B
  Value* img = b.Input("img", DType::kFloat32, {1, 2, 5, 5});
  Value* conv = b.Op("Conv", {img, b.Constant("wc", Wave({3, 2, 3, 3}))});   // weights: marked
  Value* dyn = b.Op("Conv", {img, b.Input("wd", DType::kFloat32, {3, 2, 1, 1})});  // runtime W
  for (Value* o : {s, g, v, conv, dyn}) b.Output(o);
  std::unique_ptr<Graph> graph = b.Build();
  const ref::TensorMap feeds = {{"x", Wave({2, 4, 8})}, {"k", Wave({2, 8, 4})}, {"a", Wave({3, 8})},
                                {"img", Wave({1, 2, 5, 5})}, {"wd", Wave({3, 2, 1, 1})}};
  EXPECT_TRUE(testing::RunPassAndCompare(*graph, [](Graph& gr) { return AssignPrecision(gr, "bf16"); }, feeds));
  EXPECT_EQ(Mark(*h->producer), "bf16");
  EXPECT_EQ(Mark(*g->producer), "bf16");
  EXPECT_EQ(Mark(*s->producer), "");
  EXPECT_EQ(Mark(*v->producer), "");
  EXPECT_EQ(Mark(*conv->producer), "bf16");
  EXPECT_EQ(Mark(*dyn->producer), "");
  // Idempotent: a second run changes nothing.
  absl::StatusOr<bool> again = AssignPrecision(*graph, "bf16");
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  EXPECT_FALSE(AssignPrecision(*graph, "fp8").ok());
}

TEST(AssignPrecision, RunsOnlyWhenThePipelineAsksForIt) {
  auto build = [] {
    GraphBuilder b;
    b.Output(b.Op("MatMul", {b.Input("x", DType::kFloat32, {3, 8}), b.Constant("w", Wave({8, 5}))}));
    return b.Build();
  };
  for (const std::string precision : {"float32", "bf16"}) {
    std::unique_ptr<Graph> g = build();
    ASSERT_TRUE(shape::InferShapes(*g).ok());
    PipelineOptions o;
    o.precision = precision;
    ASSERT_TRUE(RunPipeline(*g, o).ok());
    int marked = 0;
    for (const auto& n : g->nodes()) marked += Mark(*n) == "bf16";
    EXPECT_EQ(marked, precision == "bf16" ? 1 : 0) << precision;
  }
  std::unique_ptr<Graph> g = build();
  PipelineOptions bad;
  bad.precision = "int4";
  EXPECT_TRUE(absl::IsInvalidArgument(RunPipeline(*g, bad).status()));
}

TEST(AssignPrecision, MixedKeepsTheAttentionScoreProjectionsInFloat32) {
  // x -> q, k, v projections; softmax(q @ k^T * s) @ v -> output projection.
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 6, 8});
  Value* q = b.Op("MatMul", {x, b.Constant("wq", Wave({8, 8}))});
  Value* k = b.Op("MatMul", {x, b.Constant("wk", Wave({8, 8}))});
  Value* v = b.Op("MatMul", {x, b.Constant("wv", Wave({8, 8}))});
  Value* kt = b.Op("Transpose", {k}, {{"perm", Attribute::Ints({0, 2, 1})}});
  Value* s = b.Op("Mul", {b.Op("MatMul", {q, kt}), b.Constant("scale", Tensor::Scalar(DType::kFloat32, 0.35))});
  Value* p = b.Op("Softmax", {s}, {{"axis", Attribute::Int(-1)}});
  Value* o = b.Op("MatMul", {b.Op("MatMul", {p, v}), b.Constant("wo", Wave({8, 8}))});
  b.Output(o);
  for (const std::string precision : {"bf16", "bf16-mixed"}) {
    std::unique_ptr<Graph> g = b.graph().Clone();
    ASSERT_TRUE(shape::InferShapes(*g).ok());
    ASSERT_TRUE(AssignPrecision(*g, precision).ok());
    std::map<std::string, std::string> marks;
    for (const auto& n : g->nodes()) {
      if (n->op_type == "MatMul" && n->input(1)->is_constant()) marks[n->input(1)->name] = Mark(*n);
    }
    const std::string scores = precision == "bf16" ? "bf16" : "";
    EXPECT_EQ(marks["wq"], scores) << precision;
    EXPECT_EQ(marks["wk"], scores) << precision;
    EXPECT_EQ(marks["wv"], "bf16") << precision;  // after the softmax: not amplified by exp
    EXPECT_EQ(marks["wo"], "bf16") << precision;
  }
}

}  // namespace
}  // namespace kiln::passes
