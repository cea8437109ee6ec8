// The compiler front door and the differential check: batch binding, the report, the memory
// plan, and a deliberately broken pass being named by the bisection.
#include "compiler/compile.h"

#include <gtest/gtest.h>

#include "compiler/shape/infer.h"
#include "ir/builder.h"
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
  // O2 starts with the int8 lowering (before folding can turn quantized weights into floats).
  EXPECT_NE(c->report.ToJson().find("\"passes\":[{\"name\":\"fuse_qdq\""), std::string::npos);
  EXPECT_NE(c->report.ToJson().find("{\"name\":\"fold_constants\""), std::string::npos);
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

// ids/mask [batch, sequence] and a third input whose second dim is unnamed.
std::unique_ptr<Graph> SequenceInputs() {
  GraphBuilder b;
  const Shape dyn = {Dim::Symbol("batch"), Dim::Symbol("sequence")};
  Value* ids = b.Input("ids", DType::kFloat32, dyn);
  Value* mask = b.Input("mask", DType::kFloat32, dyn);
  Value* extra = b.Input("extra", DType::kFloat32, {Dim::Symbol("batch"), Dim(), 4});
  b.Output(b.Op("Add", {ids, mask}));
  b.Output(b.Op("Relu", {extra}));
  return b.Build();
}

std::string Dims(const Graph& g, size_t input) { return ShapeToString(*g.inputs[input]->shape); }

TEST(BindInputDims, ANamedDimBindsEveryInputThatCarriesIt) {
  auto g = SequenceInputs();
  shape::InputDims d;
  d.shapes["ids"] = {-1, 16};
  d.shapes["extra"] = {-1, 3, 4};
  ASSERT_TRUE(shape::BindInputDims(*g, d).ok());
  EXPECT_EQ(Dims(*g, 0), "[batch,16]");
  EXPECT_EQ(Dims(*g, 1), "[batch,16]");  // mask follows through `sequence`
  EXPECT_EQ(Dims(*g, 2), "[batch,3,4]");
  EXPECT_TRUE(shape::CheckStaticInputs(*g, /*allow_symbolic_batch=*/true).ok());
  EXPECT_FALSE(shape::CheckStaticInputs(*g, /*allow_symbolic_batch=*/false).ok());
  auto s = SequenceInputs();
  shape::InputDims by_name;
  by_name.symbols["sequence"] = 8;
  ASSERT_TRUE(shape::BindInputDims(*s, by_name).ok());
  EXPECT_EQ(Dims(*s, 1), "[batch,8]");
  // A symbol may be 0 (a decoder's empty cache at its first step); never negative.
  auto e = SequenceInputs();
  shape::InputDims empty;
  empty.symbols["sequence"] = 0;
  ASSERT_TRUE(shape::BindInputDims(*e, empty).ok());
  EXPECT_EQ(Dims(*e, 1), "[batch,0]");
  auto n = SequenceInputs();
  shape::InputDims negative;
  negative.symbols["sequence"] = -2;
  EXPECT_NE(std::string(shape::BindInputDims(*n, negative).message()).find("0 or more"),
            std::string::npos);
}

TEST(BindInputDims, ErrorsNameTheInputDimAndSymbol) {
  auto msg = [](shape::InputDims d) {
    auto g = SequenceInputs();
    return std::string(shape::BindInputDims(*g, d).message());
  };
  shape::InputDims d;
  d.shapes["idz"] = {-1, 4};
  EXPECT_NE(msg(d).find("'idz', which is not an input (inputs: ids, mask, extra)"), std::string::npos);
  d = {};
  d.shapes["ids"] = {-1, 4, 1};
  EXPECT_NE(msg(d).find("3 dims given, the model's input has 2"), std::string::npos);
  d = {};
  d.shapes["extra"] = {-1, 2, 5};
  EXPECT_NE(msg(d).find("the model fixes it at 4"), std::string::npos);
  d = {};
  d.shapes["ids"] = {-1, 4};
  d.shapes["mask"] = {-1, 5};
  EXPECT_NE(msg(d).find("dim 'sequence' is given"), std::string::npos);
  d = {};
  d.shapes["ids"] = {-1, 0};
  EXPECT_NE(msg(d).find("a size is at least 1"), std::string::npos);
  d = {};
  d.symbols["seq"] = 4;
  EXPECT_NE(msg(d).find("no input has a dim named 'seq' (symbolic dims: batch, sequence)"),
            std::string::npos);
}

TEST(CompileGraph, ASymbolicDimBesidesTheBatchNeedsAValue) {
  auto g = SequenceInputs();
  auto unbound = CompileGraph(*g, {});
  ASSERT_FALSE(unbound.ok());
  EXPECT_NE(unbound.status().message().find("input 'ids' dim 1 ('sequence') is symbolic"),
            std::string::npos) << unbound.status();
  CompileOptions o;
  o.batch = 2;
  o.dims.symbols["sequence"] = 5;
  o.dims.shapes["extra"] = {-1, 3, 4};
  auto bound = CompileGraph(*g, o);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ(Dims(*bound->graph, 0), "[2,5]");
  EXPECT_EQ(Dims(*bound->graph, 2), "[2,3,4]");
}

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
