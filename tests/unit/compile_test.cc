// The compiler front door and the differential check: batch binding, the report, the memory
// plan, and a deliberately broken pass being named by the bisection.
#include <gtest/gtest.h>

#include "compiler/compile.h"
#include "compiler/ir/builder.h"
#include "compiler/shape/infer.h"
#include "runtime/check/differential.h"

namespace kiln {
namespace {

// x[N, 8] -> MatMul(w) -> Add(b) -> Relu -> Reshape(to [N, 2, 4] via Shape/Gather/Concat)
std::unique_ptr<Graph> SmallModel() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("N"), 8});
  Tensor w(DType::kFloat32, {8, 8});
  for (int64_t i = 0; i < w.numel(); ++i) w.SetDouble(i, (i % 7) * 0.1 - 0.3);
  Value* mm = b.Op("MatMul", {x, b.Constant("w", w)});
  Value* y = b.Op("Relu", {b.Op("Add", {mm, b.Constant("b", Tensor::FromFloat({1, -1, 0, 2, 1, 0, -2, 1}))})});
  Value* shape = b.Op("Shape", {x});
  Value* n = b.Op("Gather", {shape, b.Constant("zero", Tensor::FromInt64({0}, {1}))});
  Value* target = b.Op("Concat", {n, b.Constant("rest", Tensor::FromInt64({2, 4}))},
                       {{"axis", Attribute::Int(0)}});
  b.Output(b.Op("Reshape", {y, target}));
  auto g = b.Build();
  EXPECT_TRUE(shape::InferShapes(*g).ok());
  return g;
}

TEST(Compile, BindsBatchFoldsShapeSubgraphAndPlans) {
  auto g = SmallModel();
  CompileOptions o;
  o.batch = 4;
  auto c = CompileGraph(*g, o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->report.ops_before, 7u);
  EXPECT_LT(c->report.ops_after, c->report.ops_before);
  EXPECT_EQ(c->report.op_types_after.count("Shape"), 0u);
  EXPECT_EQ(c->report.op_types_after.at("ai.kiln.FusedMatMul"), 1);
  EXPECT_EQ(StaticDims(*c->graph->outputs[0]->shape), (std::vector<int64_t>{4, 2, 4}));
  EXPECT_GE(c->report.arena_bytes, c->report.lower_bound_bytes);
  EXPECT_LE(c->report.arena_bytes, c->report.naive_bytes);
  EXPECT_NE(c->report.ToJson().find("\"passes\":[{\"name\":\"fold_constants\""), std::string::npos);
  // The original graph is untouched: still symbolic.
  EXPECT_FALSE((*g->inputs[0]->shape)[0].known());
}

TEST(Compile, O0RunsNoPassAndUnknownPassIsAnError) {
  auto g = SmallModel();
  CompileOptions o;
  o.pipeline.level = OptLevel::kO0;
  auto c = CompileGraph(*g, o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->report.passes.empty());
  o.pipeline.level = OptLevel::kO2;
  o.pipeline.disabled = {"fuse_everything"};
  EXPECT_FALSE(CompileGraph(*g, o).ok());
}

// A pass that silently negates the first Add's constant operand: a plausible optimizer bug.
class BreakBiasPass : public passes::Pass {
 public:
  std::string name() const override { return "break_bias"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override {
    for (const auto& n : graph.nodes()) {
      if (n->op_type != "Add" || !n->input(1) || !n->input(1)->constant) continue;
      Tensor t = n->input(1)->constant->Clone();
      for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, -t.GetDouble(i) - 1);
      n->inputs[1] = graph.AddConstant("broken", std::move(t));
      return true;
    }
    return false;
  }
};

TEST(Differential, BisectionNamesTheBrokenPass) {
  auto g = SmallModel();
  ASSERT_TRUE(shape::Specialize(*g, 2).ok());
  auto inputs = check::RandomInputs(*g, {});
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  std::vector<std::unique_ptr<passes::Pass>> list;
  list.push_back(*MakePass("fold_constants"));
  list.push_back(std::make_unique<BreakBiasPass>());
  list.push_back(*MakePass("fuse_matmul_epilogue"));
  auto r = check::BisectPasses(*g, list, *inputs, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->first_bad_pass, "break_bias");
  EXPECT_EQ(r->passes.size(), 2u);  // stops at the first divergence
}

TEST(Differential, CorrectPipelinePasses) {
  auto g = SmallModel();
  ASSERT_TRUE(shape::Specialize(*g, 3).ok());
  auto inputs = check::RandomInputs(*g, {});
  ASSERT_TRUE(inputs.ok());
  auto r = check::BisectPipeline(*g, PipelineOptions{}, *inputs, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->ok) << r->first_bad_pass;
  EXPECT_FALSE(r->passes.empty());
}

TEST(Differential, RandomInputsRespectIntegerRanges) {
  GraphBuilder b;
  b.Input("ids", DType::kInt64, {2, 16});
  b.Output(b.graph().inputs[0]);
  auto g = b.Build();
  check::InputRanges ranges;
  ranges.per_input["ids"] = {3, 5};
  auto in = check::RandomInputs(*g, ranges);
  ASSERT_TRUE(in.ok());
  for (int64_t i = 0; i < 32; ++i) {
    int64_t v = in->at("ids").GetInt(i);
    EXPECT_GE(v, 3);
    EXPECT_LE(v, 5);
  }
}

}  // namespace
}  // namespace kiln
