// The CPU engine's activation layouts (blocked concat and per-channel programs staying in a
// convolution's layout) and what a build shares or computes once (prepacked weights across
// engines and batch buckets, constant-only nodes), against the reference interpreter.
#include <cmath>
#include <cstring>

#include "gtest/gtest.h"
#include "tests/unit/cpu_engine_util.h"

namespace kiln {
namespace {

using namespace cpu_test;  // NOLINT: the shared checks read as part of this file

std::unique_ptr<Graph> ConcatGraph(int64_t c1, int64_t c2) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 8, 6, 6});
  Value* a = b.Op("Conv", {x, b.Constant("wa", Random({c1, 8, 1, 1}, 51))});
  Value* p = b.Op("Conv", {x, b.Constant("wb", Random({c2, 8, 3, 3}, 52))},
                  {{"pads", Ints({1, 1, 1, 1})}});
  Value* cat = b.Op("Concat", {a, p}, {{"axis", Attribute::Int(1)}});
  b.Output(b.Op("Conv", {cat, b.Constant("wc", Random({16, c1 + c2, 1, 1}, 53))}));
  return b.Build();
}

TEST(CpuEngineLayouts, ConcatStaysInTheConvolutionsLayout) {
  Outcome whole = ExpectMatchesReference(ConcatGraph(16, 32));
  cpu::CpuEngineOptions eo;
  eo.layout = cpu::ActivationLayout::kBlocked;
  auto blocked = cpu::BuildCpuEngine(whole.compiled, eo);
  ASSERT_TRUE(blocked.ok()) << blocked.status();
  // The graph input into each convolution's layout and the graph output out; around the
  // concat at most one input that its convolution left in another layout (a primitive
  // without a blocked kernel keeps its own), where the plain concat needs 6 in all.
  EXPECT_LE((*blocked)->info().layout_reorders, 4);
  ExpectMatchesReference(ConcatGraph(12, 20));  // not whole blocks: the plain concat
}

// A squeeze-and-excitation block: the activation times a per-channel scale (operand order
// both ways), and a subtraction of it from a scale (s - x: the own kernel's, since oneDNN
// broadcasts only its second operand). The products stay in the convolutions' layout.
std::unique_ptr<Graph> SqueezeExcitationGraph() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 16, 5, 5});
  Value* c = b.Op("Conv", {x, b.Constant("w1", Random({32, 16, 3, 3}, 61))},
                  {{"pads", Ints({1, 1, 1, 1})}});
  Value* s = b.Op("Sigmoid", {b.Op("Conv", {b.Op("GlobalAveragePool", {c}),
                                            b.Constant("w2", Random({32, 32, 1, 1}, 62))})});
  Value* scaled = b.Op("Mul", {s, c});
  Value* c2 = b.Op("Conv", {scaled, b.Constant("w3", Random({32, 32, 1, 1}, 63))});
  Value* m = b.Op("Mul", {c2, b.Constant("k", Random({1, 32, 1, 1}, 64))});
  b.Output(b.Op("Sub", {b.Constant("k2", Random({32, 1, 1}, 65)), m}));
  return b.Build();
}

TEST(CpuEngineLayouts, PerChannelProductsStayInTheConvolutionsLayout) {
  Outcome o = ExpectMatchesReference(SqueezeExcitationGraph());
  cpu::CpuEngineOptions eo;
  eo.layout = cpu::ActivationLayout::kBlocked;
  auto blocked = cpu::BuildCpuEngine(o.compiled, eo);
  ASSERT_TRUE(blocked.ok()) << blocked.status();
  // In, the Sub's reorder of its activation to plain, and none around the products.
  EXPECT_LE((*blocked)->info().layout_reorders, 3);
}

// A value computed only from constants but too large for fold_constants (a Tile of a small
// mask, then a comparison and Where, as Swin builds its shift mask) is computed once at build,
// not on the reference fallback every run.
TEST(CpuEngineBuild, ConstantOnlyNodesAreEvaluatedOnceAtBuild) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {64, 64, 8});
  Value* tiled = b.Op("Tile", {b.Constant("m", Random({1, 1, 8}, 71)),
                               b.Constant("reps", Tensor::FromInt64({64, 64, 1}, {3}))});
  Value* mask = b.Op("Where", {b.Op("Greater", {tiled, b.Constant("z", Random({8}, 72))}),
                               b.Constant("neg", Tensor::FromFloat({-100.f}, {1})),
                               b.Constant("zero", Tensor::FromFloat({0.f}, {1}))});
  b.Output(b.Op("Add", {x, mask}));
  Outcome o = ExpectMatchesReference(b.Build());
  ASSERT_NE(o.engine, nullptr);
  EXPECT_GE(o.engine->info().build_time_evaluated, 1);
  EXPECT_EQ(o.engine->info().fallback_ops, 0);
}

// Per-channel and per-image (squeeze-excitation) operands over a long spatial extent, as one
// fused program: in the plain layout H and W coalesce into rows of 400; after a convolution
// (channels-last or 8/16-channel blocks) the spatial dims merge into rows the per-channel
// operands repeat along, with a period (24) that does not divide the 256-element tile.
TEST(CpuEngineOwnKernels, PerChannelProgramsOverLongRows) {
  for (bool after_conv : {false, true}) {
    SCOPED_TRACE(after_conv ? "convolution layout" : "plain layout");
    GraphBuilder b;
    Value* x = b.Input("x", DType::kFloat32, {2, 24, 20, 20});
    Value* a = after_conv ? b.Op("Conv", {x, b.Constant("w", Random({24, 24, 1, 1}, 91))}) : x;
    Value* scaled = b.Op("Mul", {a, b.Constant("s", Random({24, 1, 1}, 92))});
    Value* shifted = b.Op("Add", {scaled, b.Constant("t", Random({2, 24, 1, 1}, 93))});
    Value* y = b.Op("Relu", {shifted});
    if (after_conv) y = b.Op("Conv", {y, b.Constant("w2", Random({8, 24, 1, 1}, 94))});
    b.Output(y);
    Outcome o = ExpectMatchesReference(b.Build(), 0, OptLevel::kO2);
    ASSERT_NE(o.engine, nullptr);
  }
}

std::unique_ptr<Graph> ConvReluGraph(const Tensor& w) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 4, 8, 8});
  b.Output(b.Op("Relu", {b.Op("Conv", {x, b.Constant("w", w)}, {{"pads", Ints({1, 1, 1, 1})}})}));
  return b.Build();
}

std::vector<Tensor> RunOn(runtime::Engine& e, const Tensor& x) {
  std::vector<Tensor> outs;
  EXPECT_TRUE(e.Run({x}, outs).ok());
  return outs;
}

// Engines built from one compiled graph (a model's batch buckets and instances) hold one
// prepacked copy of each weight, which outlives the engine that packed it; equal weights in
// another buffer are packed again (sharing follows the constant's identity, never its value).
TEST(CpuEngineBuild, EnginesOfOneGraphShareThePrepackedWeights) {
  const Tensor w = Random({8, 4, 3, 3}, 23);
  absl::StatusOr<CompiledGraph> c = CompileGraph(*ConvReluGraph(w), {});
  ASSERT_TRUE(c.ok()) << c.status();
  cpu::CpuEngineOptions one;  // a single build each (tuning builds candidates, which share too)
  one.layout = cpu::ActivationLayout::kPrimitive;
  one.tune_threads = false;
  auto first = cpu::BuildCpuEngine(*c, one);
  auto second = cpu::BuildCpuEngine(*c, one);
  ASSERT_TRUE(first.ok() && second.ok());
  const runtime::EngineInfo &a = (*first)->info(), &b = (*second)->info();
  EXPECT_GT(a.weight_bytes, 0);
  EXPECT_EQ(a.shared_weight_bytes, 0);
  EXPECT_EQ(b.shared_weight_bytes, a.weight_bytes);
  const Tensor x = Random({2, 4, 8, 8}, 24);
  auto want = ref::Run(*c->graph, {{"x", x}});
  ASSERT_TRUE(want.ok());
  const std::vector<Tensor> from_first = RunOn(**first, x);
  first->reset();  // the packed weights stay with the engine still using them
  const std::vector<Tensor> from_second = RunOn(**second, x);
  ASSERT_EQ(from_first.size(), 1u);
  ASSERT_EQ(from_second.size(), 1u);
  const Tensor& r = want->begin()->second;
  for (int64_t i = 0; i < r.numel(); ++i) {
    ASSERT_EQ(from_first[0].GetDouble(i), from_second[0].GetDouble(i)) << i;
    ASSERT_NEAR(from_second[0].GetDouble(i), r.GetDouble(i),
                1e-4 + 1e-4 * std::abs(r.GetDouble(i)));
  }
  absl::StatusOr<CompiledGraph> copy = CompileGraph(*ConvReluGraph(w.Clone()), {});
  ASSERT_TRUE(copy.ok());
  auto other = cpu::BuildCpuEngine(*copy, one);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)->info().shared_weight_bytes, 0);
}

// x [batch, 64] times a constant [64, 48]: oneDNN's matmul at AVX-512 (PrepackConstant), the
// own GEMM kernel at AVX2 (gemm_kernel.cc packs B itself), so the test's .avx2 run covers it.
std::unique_ptr<Graph> MatMulGraph(const Tensor& w, int64_t batch) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {batch, 64});
  b.Output(b.Op("MatMul", {x, b.Constant("w", w)}));
  return b.Build();
}

// The packed B of a matrix product does not depend on M: engines of two batch sizes over one
// weight buffer (a model's buckets) share it, and answer as the reference does; a copy of the
// weights in another buffer is packed again.
TEST(CpuEngineBuild, BatchBucketsShareTheGemmKernelsPackedWeights) {
  const Tensor w = Random({64, 48}, 31);
  absl::StatusOr<CompiledGraph> b2 = CompileGraph(*MatMulGraph(w, 2), {});
  absl::StatusOr<CompiledGraph> b5 = CompileGraph(*MatMulGraph(w, 5), {});
  ASSERT_TRUE(b2.ok() && b5.ok());
  cpu::CpuEngineOptions one;
  one.tune_threads = false;
  auto e2 = cpu::BuildCpuEngine(*b2, one);
  auto e5 = cpu::BuildCpuEngine(*b5, one);
  ASSERT_TRUE(e2.ok() && e5.ok());
  EXPECT_GT((*e2)->info().weight_bytes, 0);
  EXPECT_EQ((*e5)->info().shared_weight_bytes, (*e5)->info().weight_bytes);
  e2->reset();
  const Tensor x = Random({5, 64}, 32);
  auto want = ref::Run(*b5->graph, {{"x", x}});
  ASSERT_TRUE(want.ok());
  const std::vector<Tensor> got = RunOn(**e5, x);
  ASSERT_EQ(got.size(), 1u);
  const Tensor& r = want->begin()->second;
  for (int64_t i = 0; i < r.numel(); ++i) {
    ASSERT_NEAR(got[0].GetDouble(i), r.GetDouble(i), 1e-4 + 1e-4 * std::abs(r.GetDouble(i))) << i;
  }
  absl::StatusOr<CompiledGraph> copy = CompileGraph(*MatMulGraph(w.Clone(), 5), {});
  ASSERT_TRUE(copy.ok());
  auto other = cpu::BuildCpuEngine(*copy, one);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)->info().shared_weight_bytes, 0);
}

// DenseNet's pre-activation: a concat, then BatchNorm as per-channel Mul and Add, then ReLU,
// then a convolution. The element-wise ops read and write the convolutions' layout.
TEST(CpuEngineLayouts, PerChannelElementwiseStaysInTheConvolutionsLayout) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 16, 5, 5});
  Value* c = b.Op("Conv", {x, b.Constant("w1", Random({32, 16, 3, 3}, 81))},
                  {{"pads", Ints({1, 1, 1, 1})}});
  Value* cat = b.Op("Concat", {c, b.Op("Conv", {x, b.Constant("w2", Random({16, 16, 1, 1}, 82))})},
                    {{"axis", Attribute::Int(1)}});
  Value* bn = b.Op("Add", {b.Op("Mul", {cat, b.Constant("g", Random({48, 1, 1}, 83))}),
                           b.Constant("beta", Random({1, 48, 1, 1}, 84))});
  b.Output(b.Op("Conv", {b.Op("Relu", {bn}), b.Constant("w3", Random({16, 48, 1, 1}, 85))}));
  Outcome o = ExpectMatchesReference(b.Build());
  cpu::CpuEngineOptions eo;
  eo.layout = cpu::ActivationLayout::kBlocked;
  auto blocked = cpu::BuildCpuEngine(o.compiled, eo);
  ASSERT_TRUE(blocked.ok()) << blocked.status();
  // The graph input (once per convolution reading it), the output, and at most one concat
  // input another convolution left in another layout; none around the element-wise ops.
  EXPECT_LE((*blocked)->info().layout_reorders, 4);
}

}  // namespace
}  // namespace kiln
