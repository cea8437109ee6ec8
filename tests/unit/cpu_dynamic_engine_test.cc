// The CPU engine on graphs with data-dependent shapes (runtime/dynamic_engine.h): the
// static region planned, the rest on the reference per run. Every case runs several inputs
// that give different output sizes through one engine and compares with ref::Run.
#include <algorithm>
#include <cmath>

#include "compiler/compile.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ops/interpreter.h"
#include "runtime/cpu/cpu_engine.h"
#include "runtime/dynamic_engine.h"
#include "runtime/reference/reference_engine.h"

namespace kiln {
namespace {

struct Built {
  CompiledGraph compiled;
  std::unique_ptr<runtime::Engine> engine;
};

Built Build(const Graph& g, bool dynamic = true) {
  Built b;
  CompileOptions co;
  co.pipeline.level = OptLevel::kO0;  // the nodes as built, so the counts below hold
  co.allow_dynamic_shapes = dynamic;
  absl::StatusOr<CompiledGraph> c = CompileGraph(g, co);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return b;
  b.compiled = std::move(*c);
  cpu::CpuEngineOptions eo;
  eo.dynamic_shapes = dynamic;
  auto e = cpu::BuildCpuEngine(b.compiled, eo);
  EXPECT_TRUE(e.ok()) << e.status();
  if (e.ok()) b.engine = std::move(*e);
  return b;
}

// Runs `feeds` through the engine (reusing `outs` from the previous call, as a server
// would) and through the reference on the graph as built; every output must agree.
void ExpectMatches(const Graph& g, runtime::Engine& engine, const ref::TensorMap& feeds,
                   std::vector<Tensor>& outs) {
  auto want = ref::Run(g, feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  std::vector<Tensor> ins;
  for (const auto& spec : engine.inputs()) ins.push_back(feeds.at(spec.name));
  absl::Status st = engine.Run(ins, outs);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(outs.size(), engine.outputs().size());
  for (size_t k = 0; k < outs.size(); ++k) {
    const Tensor& w = want->at(engine.outputs()[k].name);
    SCOPED_TRACE(engine.outputs()[k].name);
    ASSERT_EQ(outs[k].dtype(), w.dtype());
    ASSERT_EQ(outs[k].shape(), w.shape());
    for (int64_t i = 0; i < w.numel(); ++i) {
      const double a = outs[k].GetDouble(i), b = w.GetDouble(i);
      ASSERT_LE(std::abs(a - b), 1e-5 + 1e-5 * std::abs(b)) << "element " << i;
    }
  }
}

Tensor Floats(std::vector<float> v, std::vector<int64_t> shape) {
  return Tensor::FromFloat(v, std::move(shape));
}

// x [4, 5] -> Relu -> NonZero -> Transpose (an output) and Gather of x's rows by the
// nonzero row indices -> ReduceSum over them -> Add: static shapes again, but after the
// data-dependent node, so in the dynamic region. Relu(x) * 2 is a static-region output.
std::unique_ptr<Graph> NonZeroGraph() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4, 5});
  Value* r = b.Op("Relu", {x});
  Value* nz = b.Op("NonZero", {r});
  Value* t = b.Op("Transpose", {nz}, {{"perm", Attribute::Ints({1, 0})}});
  Value* rows = b.Op("Gather", {nz, b.Constant("zero", Tensor::FromInt64({0}))},
                     {{"axis", Attribute::Int(0)}});
  Value* picked = b.Op("Gather", {x, rows}, {{"axis", Attribute::Int(0)}});
  Value* sum = b.Op("ReduceSum", {picked, b.Constant("axes", Tensor::FromInt64({0}, {1}))},
                    {{"keepdims", Attribute::Int(1)}});
  Value* y = b.Op("Add", {sum, b.Constant("bias", Floats({1, 2, 3, 4, 5}, {1, 5}))});
  Value* twice = b.Op("Mul", {r, b.Constant("two", Floats({2}, {}))});
  b.Output(y);
  b.Output(t);
  b.Output(twice);
  return b.Build();
}

// x with `positive` leading elements > 0, the rest < 0: NonZero finds `positive` entries.
Tensor WithPositives(int positive) {
  std::vector<float> v(20);
  for (int i = 0; i < 20; ++i) v[i] = (i < positive ? 1.f : -1.f) * (0.25f + 0.5f * i);
  std::reverse(v.begin(), v.begin() + positive);  // positives scattered over rows unevenly
  return Floats(v, {4, 5});
}

TEST(CpuEngineDynamic, NonZeroThenGatherTransposeAndStaticOps) {
  std::unique_ptr<Graph> g = NonZeroGraph();
  Built b = Build(*g);
  ASSERT_NE(b.engine, nullptr);
  EXPECT_TRUE(runtime::HasDynamicRegion(*b.engine));
  const runtime::EngineInfo& info = b.engine->info();
  // NonZero, Transpose, both Gathers, ReduceSum, Add run on the reference; Relu and Mul
  // are planned.
  EXPECT_GE(info.fallback_ops, 6);
  EXPECT_EQ(info.total_ops, 8);
  for (const char* op : {"NonZero", "Transpose", "Gather", "ReduceSum", "Add"}) {
    EXPECT_NE(std::find(info.fallback_op_types.begin(), info.fallback_op_types.end(), op),
              info.fallback_op_types.end())
        << op;
  }
  EXPECT_EQ(b.engine->outputs()[1].shape, (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(b.engine->outputs()[2].shape, (std::vector<int64_t>{4, 5}));
  std::vector<Tensor> outs;
  for (int positive : {7, 20, 0, 3, 3, 12}) {
    SCOPED_TRACE(positive);
    ExpectMatches(*g, *b.engine, {{"x", WithPositives(positive)}}, outs);
    EXPECT_EQ(outs[1].shape(), (std::vector<int64_t>{positive, 2}));
  }
}

// Reshape to a shape computed from an input's values: y = Sigmoid(Reshape(Relu(x), |d|)).
TEST(CpuEngineDynamic, ReshapeToComputedShape) {
  GraphBuilder gb;
  Value* x = gb.Input("x", DType::kFloat32, {2, 6});
  Value* d = gb.Input("d", DType::kInt64, {2});
  Value* shape = gb.Op("Abs", {d});
  Value* y = gb.Op("Reshape", {gb.Op("Relu", {x}), shape});
  gb.Output(gb.Op("Sigmoid", {y}));
  std::unique_ptr<Graph> g = gb.Build();
  Built b = Build(*g);
  ASSERT_NE(b.engine, nullptr);
  EXPECT_TRUE(runtime::HasDynamicRegion(*b.engine));
  // Reshape and Sigmoid (and the int64 Abs, which the static region runs on its fallback).
  const runtime::EngineInfo& info = b.engine->info();
  EXPECT_GE(info.fallback_ops, 2);
  for (const char* op : {"Reshape", "Sigmoid"}) {
    EXPECT_NE(std::find(info.fallback_op_types.begin(), info.fallback_op_types.end(), op),
              info.fallback_op_types.end())
        << op;
  }
  std::vector<float> xs(12);
  for (int i = 0; i < 12; ++i) xs[i] = static_cast<float>(i) - 5.5f;
  std::vector<Tensor> outs;
  for (const auto& dims : std::vector<std::vector<int64_t>>{{3, 4}, {-4, 3}, {12, 1}, {1, -12}, {3, 4}}) {
    ExpectMatches(*g, *b.engine, {{"x", Floats(xs, {2, 6})}, {"d", Tensor::FromInt64(dims, {2})}},
                  outs);
    EXPECT_EQ(outs[0].shape(), (std::vector<int64_t>{std::abs(dims[0]), std::abs(dims[1])}));
  }
}

// Nothing static to plan: the data-dependent node reads the graph input directly, and a
// graph output is the input itself.
TEST(CpuEngineDynamic, NoStaticRegion) {
  GraphBuilder gb;
  Value* x = gb.Input("x", DType::kFloat32, {4, 5});
  gb.Output(gb.Op("NonZero", {x}));
  gb.Output(x);
  std::unique_ptr<Graph> g = gb.Build();
  Built b = Build(*g);
  ASSERT_NE(b.engine, nullptr);
  EXPECT_EQ(b.engine->info().fallback_ops, 1);
  EXPECT_EQ(b.engine->info().fallback_op_types, std::vector<std::string>{"NonZero"});
  EXPECT_EQ(b.engine->outputs()[0].shape, (std::vector<int64_t>{2, -1}));
  std::vector<Tensor> outs;
  for (int positive : {5, 0, 20}) ExpectMatches(*g, *b.engine, {{"x", WithPositives(positive)}}, outs);
}

// Negative cases: a graph with static shapes gets the plain engine even when dynamic shapes
// are allowed, and without the option a data-dependent graph is refused as before.
TEST(CpuEngineDynamic, StaticGraphBuildsThePlainEngine) {
  GraphBuilder gb;
  Value* x = gb.Input("x", DType::kFloat32, {4, 5});
  gb.Output(gb.Op("Add", {gb.Op("Relu", {x}), gb.Constant("one", Floats({1}, {}))}));
  std::unique_ptr<Graph> g = gb.Build();
  Built b = Build(*g);
  ASSERT_NE(b.engine, nullptr);
  EXPECT_FALSE(runtime::HasDynamicRegion(*b.engine));
  EXPECT_EQ(b.engine->info().fallback_ops, 0);
  std::vector<Tensor> outs;
  ExpectMatches(*g, *b.engine, {{"x", WithPositives(9)}}, outs);
}

TEST(CpuEngineDynamic, RefusedWithoutTheOption) {
  std::unique_ptr<Graph> g = NonZeroGraph();
  CompileOptions co;
  EXPECT_FALSE(CompileGraph(*g, co).ok());  // an intermediate cannot be planned
  co.allow_dynamic_shapes = true;
  absl::StatusOr<CompiledGraph> c = CompileGraph(*g, co);
  ASSERT_TRUE(c.ok()) << c.status();
  auto e = cpu::BuildCpuEngine(*c, cpu::CpuEngineOptions{});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(std::string(e.status().message()).find("no static shape"), std::string::npos)
      << e.status();
}

// The two-region engine takes any backend's engine for its static region: here the reference
// engine, so it is proven apart from the CPU engine. Its builder gets the static sub-graph
// only (all static shapes), and the device named is what info() and messages say.
TEST(DynamicEngine, AnyBackendBuildsTheStaticRegion) {
  std::unique_ptr<Graph> g = NonZeroGraph();
  CompileOptions co;
  co.pipeline.level = OptLevel::kO0;
  co.allow_dynamic_shapes = true;
  absl::StatusOr<CompiledGraph> c = CompileGraph(*g, co);
  ASSERT_TRUE(c.ok()) << c.status();
  int builds = 0;
  auto build_static = [&](const CompiledGraph& part) {
    ++builds;
    EXPECT_FALSE(HasDynamicShapes(*part.graph));
    return runtime::BuildReferenceEngine(part);
  };
  auto e = runtime::BuildDynamicEngine(*c, build_static, "reference", "reference");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(builds, 1);
  EXPECT_TRUE(runtime::HasDynamicRegion(**e));
  EXPECT_GT((*e)->info().fallback_ops, 0);
  std::vector<Tensor> outs;
  for (int positive : {7, 0, 20}) ExpectMatches(*g, **e, {{"x", WithPositives(positive)}}, outs);
  // Negative: a static builder's refusal is the engine's, and messages name the device.
  auto refused = runtime::BuildDynamicEngine(
      *c,
      [](const CompiledGraph&) -> absl::StatusOr<std::unique_ptr<runtime::Engine>> {
        return absl::FailedPreconditionError("no GPU 0");
      },
      "cuda:0", "cuda");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "no GPU 0");
  auto empty = runtime::BuildDynamicEngine(CompiledGraph{}, build_static, "cuda:0", "cuda");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(), "cuda:0 engine: no graph");
}

}  // namespace
}  // namespace kiln
