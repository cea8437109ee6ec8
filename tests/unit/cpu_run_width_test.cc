// Engines built wider than their runs (CpuEngineOptions::run_threads, runtime/run_width.h): an
// engine of kernels that split their work by each run's team runs at its default team unless
// the calling thread widens it, with the same answers at either width; one holding a oneDNN
// primitive that partitions its work for its creation's team is built at the narrow team.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>

#include "runtime/cpu/serial_work.h"
#include "runtime/run_width.h"
#include "tests/unit/cpu_engine_util.h"

namespace kiln {
namespace {

using cpu_test::Ints;
using cpu_test::Random;

// Products, an element-wise epilogue and a softmax: each large enough to split over two
// threads (no kernel runs serial for its size).
std::unique_ptr<Graph> ProductsGraph() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {64, 256});
  Value* h = b.Op("MatMul", {x, b.Constant("w1", Random({256, 256}, 51))});
  h = b.Op("Relu", {b.Op("Add", {h, b.Constant("b1", Random({256}, 52))})});
  Value* y = b.Op("MatMul", {h, b.Constant("w2", Random({256, 512}, 53))});
  b.Output(b.Op("Softmax", {y}));
  return b.Build();
}

// A decode step's projection: one row per batch entry ([8, 1, 64]) times a weight, its bias
// and the residual added on the finished tiles, as one tall product of 8 rows (the residual's
// size-1 row dim is not a broadcast there).
std::unique_ptr<Graph> OneRowPerEntryGraph() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {8, 1, 64});
  Value* h = b.Op("MatMul", {x, b.Constant("w", Random({64, 64}, 58))});
  h = b.Op("Add", {h, b.Constant("b", Random({64}, 59))});
  b.Output(b.Op("Add", {h, x}));
  return b.Build();
}

std::unique_ptr<Graph> ConvGraph() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 16, 32, 32});
  Value* w = b.Constant("w", Random({16, 16, 3, 3}, 54));
  b.Output(b.Op("Relu", {b.Op("Conv", {x, w}, {{"pads", Ints({1, 1, 1, 1})}})}));
  return b.Build();
}

// A pool alone: a oneDNN primitive NarrowAtOnce does not foresee from the graph.
std::unique_ptr<Graph> PoolGraph() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 16, 64, 64});
  b.Output(b.Op("MaxPool", {x}, {{"kernel_shape", Ints({3, 3})}, {"pads", Ints({1, 1, 1, 1})}}));
  return b.Build();
}

cpu::CpuEngineOptions WideOptions() {
  cpu::CpuEngineOptions eo;
  eo.threads = 2;
  eo.run_threads = 1;
  eo.tune_threads = false;  // the team as asked
  return eo;
}

// Runs `engine` on `in` and returns its first output with the team the run left this thread.
std::pair<Tensor, int> RunOnce(runtime::Engine& engine, const Tensor& in) {
  omp_set_num_threads(7);  // whatever another engine left here
  std::vector<Tensor> outs;
  EXPECT_TRUE(engine.Run({in}, outs).ok());
  return {outs.at(0), omp_get_max_threads()};
}

// `got` against the reference interpreter's single output of `g` on `feed`, element by
// element within atol + 1e-4 relative.
void ExpectLikeReference(const Tensor& got, const Graph& g, const ref::TensorMap& feed,
                         double atol) {
  auto want = ref::Run(g, feed);
  ASSERT_TRUE(want.ok()) << want.status();
  const Tensor& w = want->begin()->second;
  ASSERT_EQ(w.shape(), got.shape());
  for (int64_t i = 0; i < w.numel(); ++i) {
    ASSERT_NEAR(got.GetDouble(i), w.GetDouble(i), atol + 1e-4 * std::abs(w.GetDouble(i))) << i;
  }
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(CpuRunWidth, AnEngineOfOwnKernelsRunsNarrowUnlessTheCallerWidens) {
  auto g = ProductsGraph();
  CompiledGraph keep = std::move(*CompileGraph(*g, {}));
  auto built = cpu::BuildCpuEngine(keep, WideOptions());
  ASSERT_TRUE(built.ok()) << built.status();
  runtime::Engine& engine = **built;
  EXPECT_EQ(engine.info().threads, 1);
  EXPECT_EQ(engine.info().max_threads, 2);
  EXPECT_EQ(engine.info().fallback_ops, 0);
  const Tensor in = Random({64, 256}, 55);
  auto [narrow, narrow_team] = RunOnce(engine, in);
  EXPECT_EQ(narrow_team, 1);
  std::pair<Tensor, int> wide;
  {
    runtime::ScopedRunWidth widest(runtime::ScopedRunWidth::kWidest);
    wide = RunOnce(engine, in);
  }
  EXPECT_EQ(wide.second, 2);  // no more than the engine was built for
  // The teams split rows and columns, never a sum: the same bits either way.
  EXPECT_TRUE(SameBits(narrow, wide.first));
  ExpectLikeReference(narrow, *keep.graph, {{"x", in}}, 1e-6);
  EXPECT_EQ(RunOnce(engine, in).second, 1);  // the scope ended: narrow again
}

TEST(CpuRunWidth, OneRowPerEntryWithAResidualOnKilnsGemm) {
  auto g = OneRowPerEntryGraph();
  CompileOptions co;
  co.pipeline.level = OptLevel::kO2;
  CompiledGraph keep = std::move(*CompileGraph(*g, co));
  EXPECT_EQ(keep.report.op_types_after.count("ai.kiln.FusedMatMul"), 1u);
  auto engine = std::move(*cpu::BuildCpuEngine(keep, WideOptions()));
  EXPECT_EQ(engine->info().max_threads, 2);  // the product runs on Kiln's GEMM
  EXPECT_EQ(engine->info().fallback_ops, 0);
  const Tensor in = Random({8, 1, 64}, 60);
  const Tensor narrow = RunOnce(*engine, in).first;
  runtime::ScopedRunWidth widest(runtime::ScopedRunWidth::kWidest);
  EXPECT_TRUE(SameBits(narrow, RunOnce(*engine, in).first));
  ExpectLikeReference(narrow, *g, {{"x", in}}, 1e-5);
}

// A decode step's attention values (probabilities of 5 query rows per head times the cached
// values as stored): in an engine built wide they are axpys over the values' rows (oneDNN's
// matmul would pin the engine's team), at every ISA level.
TEST(CpuRunWidth, AttentionValuesAsStoredFollowTheTeam) {
  GraphBuilder b;
  Value* p = b.Input("p", DType::kFloat32, {2, 3, 5, 77});
  Value* v = b.Input("v", DType::kFloat32, {2, 3, 77, 40});
  b.Output(b.Op("MatMul", {p, v}));
  auto g = b.Build();
  CompiledGraph keep = std::move(*CompileGraph(*g, {}));
  auto engine = std::move(*cpu::BuildCpuEngine(keep, WideOptions()));
  EXPECT_EQ(engine->info().max_threads, 2);
  const Tensor pt = Random({2, 3, 5, 77}, 61), vt = Random({2, 3, 77, 40}, 62);
  std::vector<Tensor> outs;
  runtime::ScopedRunWidth widest(runtime::ScopedRunWidth::kWidest);
  ASSERT_TRUE(engine->Run({pt, vt}, outs).ok());
  ExpectLikeReference(outs[0], *g, {{"p", pt}, {"v", vt}}, 1e-5);
}

TEST(CpuRunWidth, WithoutRunThreadsTheEngineRunsAtItsTeamAndACallerMayNarrowIt) {
  auto g = ProductsGraph();
  CompiledGraph keep = std::move(*CompileGraph(*g, {}));
  cpu::CpuEngineOptions eo = WideOptions();
  eo.run_threads = 0;
  auto engine = std::move(*cpu::BuildCpuEngine(keep, eo));
  EXPECT_EQ(engine->info().threads, 2);
  EXPECT_EQ(engine->info().max_threads, 2);
  const Tensor in = Random({64, 256}, 56);
  EXPECT_EQ(RunOnce(*engine, in).second, 2);
  runtime::ScopedRunWidth one(1);
  EXPECT_EQ(RunOnce(*engine, in).second, 1);
}

// The negative: a convolution runs on oneDNN, whose kernel forks the team it was created
// with however few threads a run allows, so the engine is built at the narrow team and a
// widened run stays there.
TEST(CpuRunWidth, AnEngineWithAOneDnnPrimitiveIsBuiltAtTheNarrowTeam) {
  auto g = ConvGraph();
  CompiledGraph keep = std::move(*CompileGraph(*g, {}));
  auto engine = std::move(*cpu::BuildCpuEngine(keep, WideOptions()));
  EXPECT_EQ(engine->info().threads, 1);
  EXPECT_EQ(engine->info().max_threads, 1);
  runtime::ScopedRunWidth widest(runtime::ScopedRunWidth::kWidest);
  EXPECT_EQ(RunOnce(*engine, Random({1, 16, 32, 32}, 57)).second, 1);
}

// A convolution is foreseen from the graph: built at run_threads at once. Products in float
// (Kiln's GEMM follows the team), options without narrower runs, and run_threads not below
// threads are not narrowed.
TEST(CpuRunWidth, AConvolutionIsForeseenAndBuiltNarrowAtOnce) {
  auto narrow = cpu::NarrowAtOnce(*ConvGraph(), WideOptions());
  ASSERT_TRUE(narrow);
  EXPECT_EQ(narrow->threads, 1);
  EXPECT_EQ(narrow->run_threads, 0);
  EXPECT_FALSE(cpu::NarrowAtOnce(*ProductsGraph(), WideOptions()));
  EXPECT_FALSE(cpu::NarrowAtOnce(*ConvGraph(), cpu::CpuEngineOptions{}));
  cpu::CpuEngineOptions same = WideOptions();
  same.run_threads = 2;
  EXPECT_FALSE(cpu::NarrowAtOnce(*ConvGraph(), same));
}

// What the graph does not foretell is found after the wide build: a pool's engine still comes
// back built at the narrow team, and runs there even when widened.
TEST(CpuRunWidth, APrimitiveFoundAfterTheBuildIsBuiltAgainNarrow) {
  auto g = PoolGraph();
  EXPECT_FALSE(cpu::NarrowAtOnce(*g, WideOptions()));
  CompiledGraph keep = std::move(*CompileGraph(*g, {}));
  auto engine = std::move(*cpu::BuildCpuEngine(keep, WideOptions()));
  const Tensor x = Random({2, 16, 64, 64}, 60);
  EXPECT_EQ(engine->info().threads, 1);  // MaxPool is a oneDNN primitive at every level
  EXPECT_EQ(engine->info().max_threads, 1);
  runtime::ScopedRunWidth widest(runtime::ScopedRunWidth::kWidest);
  auto [y, team] = RunOnce(*engine, x);
  EXPECT_EQ(team, 1);
  ExpectLikeReference(y, *g, {{"x", x}}, 0.0);
}

}  // namespace
}  // namespace kiln
