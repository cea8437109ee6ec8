// The CPU engine against the reference interpreter: per kernel family (oneDNN conv with every
// post-op, matmul/gemm variants, pools), blocked layouts flowing between convolutions, the
// reference fallback, input validation, and steady-state allocations.
#include "runtime/cpu/cpu_engine.h"

#include <omp.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "compiler/compile.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/kiln_ops.h"
#include "ops/interpreter.h"
#include "runtime/check/differential.h"
#include "tests/unit/cpu_engine_util.h"

// Counts every heap allocation in this process, from any library and any thread: the test
// binary interposes glibc's allocation entry points and forwards to glibc's own. (The CPU
// engine replaces `operator new`; its pool never reaches malloc, the rest of it does.)
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}
static std::atomic<long> g_allocs{0};
extern "C" void* malloc(size_t n) noexcept {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(n);
}
extern "C" void* calloc(size_t n, size_t size) noexcept {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(n, size);
}
extern "C" void* realloc(void* p, size_t n) noexcept {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, n);
}
extern "C" void* memalign(size_t align, size_t n) noexcept {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(align, n);
}
extern "C" void* aligned_alloc(size_t align, size_t n) noexcept { return memalign(align, n); }
extern "C" int posix_memalign(void** out, size_t align, size_t n) noexcept {
  if (align < sizeof(void*) || (align & (align - 1)) != 0) return EINVAL;
  void* p = memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
extern "C" void free(void* p) noexcept { __libc_free(p); }

namespace kiln {
namespace {

using namespace cpu_test;  // NOLINT: the shared checks read as part of this file

TEST(CpuEngineConv, PlainConvWithBiasPadsStrides) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 8, 11, 9});
  Value* w = b.Constant("w", Random({16, 8, 3, 3}, 1, 0.3f));
  Value* bias = b.Constant("b", Random({16}, 2));
  b.Output(b.Op("Conv", {x, w, bias},
                {{"pads", Ints({1, 0, 2, 1})}, {"strides", Ints({2, 1})}}));
  ExpectMatchesReference(b.Build());
}

class CpuEngineEpilogue : public ::testing::TestWithParam<EpilogueStep> {};

TEST_P(CpuEngineEpilogue, FusedConvPostOp) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 8, 10, 10});
  Value* w = b.Constant("w", Random({16, 8, 3, 3}, 3, 0.5f));
  Value* bias = b.Constant("b", Random({16}, 4));
  b.Output(FusedConv(b, {x, w, bias}, {{"pads", Ints({1, 1, 1, 1})}}, {GetParam()}));
  ExpectMatchesReference(b.Build());
}

INSTANTIATE_TEST_SUITE_P(
    Activations, CpuEngineEpilogue,
    ::testing::Values(EpilogueStep{"Relu"}, EpilogueStep{"LeakyRelu", 0.1f},
                      EpilogueStep{"Clip", -0.5f, 0.6f}, EpilogueStep{"Sigmoid"},
                      EpilogueStep{"HardSigmoid", 0.2f, 0.5f}, EpilogueStep{"HardSwish"},
                      EpilogueStep{"Tanh"}, EpilogueStep{"Gelu"}, EpilogueStep{"GeluTanh"},
                      EpilogueStep{"SiLU"}),
    [](const auto& info) { return info.param.op; });

TEST(CpuEngineConv, ResidualSumThenRelu) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 16, 8, 8});
  Value* w1 = b.Constant("w1", Random({16, 16, 3, 3}, 5, 0.3f));
  Value* w2 = b.Constant("w2", Random({16, 16, 1, 1}, 6, 0.3f));
  Value* none = nullptr;
  // a -> blocked; residual of the second conv is a (blocked, same layout as dst).
  Value* a = FusedConv(b, {x, w1}, {{"pads", Ints({1, 1, 1, 1})}}, {{"Relu"}});
  Value* y = FusedConv(b, {a, w2, none, a}, {}, {{"Add"}, {"Relu"}});
  b.Output(y);
  ExpectMatchesReference(b.Build());
}

// An activation before the residual sum (EfficientNetV2's SiLU then Add): oneDNN 2.6 has no
// AVX2 kernel for that post-op chain and would run the convolution on its reference code.
// The engine then runs the bare convolution and the epilogue with its own ops: no slow op
// at any ISA level (the .avx2 run of this test proves the AVX2 path), dying residual or not.
TEST(CpuEngineConv, ActivationThenSumNeverRunsOnReferenceCode) {
  for (bool dying : {false, true}) {
    SCOPED_TRACE(dying ? "dying residual" : "residual read again");
    GraphBuilder b;
    Value* x = b.Input("x", DType::kFloat32, {1, 16, 8, 8});
    Value* w1 = b.Constant("w1", Random({16, 16, 1, 1}, 50, 0.3f));
    Value* w2 = b.Constant("w2", Random({16, 16, 3, 3}, 51, 0.3f));
    Value* none = nullptr;
    Value* r = b.Op("Conv", {x, w1});
    Value* y = FusedConv(b, {x, w2, none, r}, {{"pads", Ints({1, 1, 1, 1})}}, {{"SiLU"}, {"Add"}});
    b.Output(y);
    if (!dying) b.Output(b.Op("Relu", {r}));
    Outcome o = ExpectMatchesReference(b.Build());
    ASSERT_TRUE(o.engine);
    EXPECT_TRUE(o.engine->info().slow_ops.empty()) << o.engine->info().slow_ops[0];
  }
}

TEST(CpuEngineConv, DyingResidualIsSummedInPlace) {
  // b dies at the last conv, so its blocked buffer becomes the output's (no copy).
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 16, 8, 8});
  Value* w1 = b.Constant("w1", Random({16, 16, 3, 3}, 40, 0.3f));
  Value* w2 = b.Constant("w2", Random({16, 16, 1, 1}, 41, 0.3f));
  Value* w3 = b.Constant("w3", Random({16, 16, 3, 3}, 42, 0.3f));
  Value* none = nullptr;
  Value* a = b.Op("Conv", {x, w1}, {{"pads", Ints({1, 1, 1, 1})}});
  Value* r = b.Op("Conv", {x, w2});
  Value* y = FusedConv(b, {a, w3, none, r}, {{"pads", Ints({1, 1, 1, 1})}}, {{"Add"}, {"Relu"}});
  b.Output(b.Op("MaxPool", {y}, {{"kernel_shape", Ints({2, 2})}, {"strides", Ints({2, 2})}}));
  ExpectMatchesReference(b.Build());
}

TEST(CpuEngineConv, ResidualFromGraphInput) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 8, 6, 6});
  Value* r = b.Input("r", DType::kFloat32, {1, 8, 6, 6});
  Value* w = b.Constant("w", Random({8, 8, 3, 3}, 7, 0.3f));
  Value* none = nullptr;
  b.Output(FusedConv(b, {x, w, none, r}, {{"pads", Ints({1, 1, 1, 1})}}, {{"Add"}}));
  ExpectMatchesReference(b.Build());
}

TEST(CpuEngineConv, GroupedDepthwiseDilated) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 12, 13, 13});
  Value* wg = b.Constant("wg", Random({24, 4, 3, 3}, 8, 0.4f));
  Value* wd = b.Constant("wd", Random({24, 1, 3, 3}, 9, 0.4f));
  Value* g = b.Op("Conv", {x, wg}, {{"group", Attribute::Int(3)}, {"pads", Ints({1, 1, 1, 1})}});
  Value* d = b.Op("Conv", {g, wd},
                  {{"group", Attribute::Int(24)}, {"dilations", Ints({2, 2})},
                   {"pads", Ints({2, 2, 2, 2})}, {"strides", Ints({2, 2})}});
  b.Output(d);
  ExpectMatchesReference(b.Build());
}

TEST(CpuEngineConv, OneAndThreeSpatialDims) {
  GraphBuilder b;
  Value* x1 = b.Input("x1", DType::kFloat32, {2, 4, 17});
  Value* x3 = b.Input("x3", DType::kFloat32, {1, 4, 5, 6, 7});
  Value* w1 = b.Constant("w1", Random({8, 4, 3}, 10, 0.4f));
  Value* w3 = b.Constant("w3", Random({8, 4, 3, 3, 3}, 11, 0.4f));
  b.Output(b.Op("Conv", {x1, w1}, {{"auto_pad", Attribute::String("SAME_UPPER")}}));
  b.Output(b.Op("Conv", {x3, w3}, {{"pads", Ints({1, 1, 1, 1, 1, 1})}}));
  ExpectMatchesReference(b.Build());
}

TEST(CpuEngineConv, BlockedChainFeedsFallbackAndOutput) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 3, 16, 16});
  Value* w1 = b.Constant("w1", Random({24, 3, 3, 3}, 12, 0.4f));
  Value* w2 = b.Constant("w2", Random({24, 24, 3, 3}, 13, 0.2f));
  Value* a = b.Op("Conv", {x, w1}, {{"pads", Ints({1, 1, 1, 1})}});
  Value* p = b.Op("MaxPool", {a}, {{"kernel_shape", Ints({2, 2})}, {"strides", Ints({2, 2})}});
  Value* c = b.Op("Conv", {p, w2}, {{"pads", Ints({1, 1, 1, 1})}});
  b.Output(b.Op("Softmax", {c}, {{"axis", Attribute::Int(1)}}));  // fallback reads plain
  b.Output(b.Op("GlobalAveragePool", {c}));
  ExpectMatchesReference(b.Build(), /*max_fallbacks=*/1);
}

TEST(CpuEngineMatMul, Variants) {
  GraphBuilder b;
  Value* a2 = b.Input("a2", DType::kFloat32, {5, 7});
  Value* a3 = b.Input("a3", DType::kFloat32, {3, 5, 7});
  Value* a4 = b.Input("a4", DType::kFloat32, {2, 1, 5, 7});
  Value* b4 = b.Input("b4", DType::kFloat32, {1, 3, 7, 4});
  Value* w = b.Constant("w", Random({7, 6}, 14));
  b.Output(b.Op("MatMul", {a2, w}));
  b.Output(b.Op("MatMul", {a3, w}));
  b.Output(b.Op("MatMul", {a4, b4}));  // runtime B, broadcast batch dims
  ExpectMatchesReference(b.Build());
}

TEST(CpuEngineMatMul, GemmTransposesAlphaBeta) {
  GraphBuilder b;
  Value* a = b.Input("a", DType::kFloat32, {7, 5});
  Value* c = b.Input("c", DType::kFloat32, {5, 6});
  Value* wt = b.Constant("wt", Random({6, 7}, 15));
  Value* bias = b.Constant("bias", Random({6}, 16));
  b.Output(b.Op("Gemm", {a, wt, bias},
                {{"transA", Attribute::Int(1)}, {"transB", Attribute::Int(1)},
                 {"alpha", Attribute::Float(0.5f)}, {"beta", Attribute::Float(2.f)}}));
  b.Output(b.Op("Gemm", {a, wt, c}, {{"transA", Attribute::Int(1)}, {"transB", Attribute::Int(1)}}));
  ExpectMatchesReference(b.Build());
}

TEST(CpuEngineMatMul, FusedMatMulGeluAndResidual) {
  GraphBuilder b;
  b.graph().opsets[kKilnDomain] = 1;
  Value* x = b.Input("x", DType::kFloat32, {2, 4, 8});
  Value* r = b.Input("r", DType::kFloat32, {2, 4, 16});
  Value* w = b.Constant("w", Random({8, 16}, 17));
  Value* bias = b.Constant("bias", Random({16}, 18));
  Value* y = b.Op("FusedMatMul", {x, w, bias, r}, {}, kKilnDomain);
  kiln_ops::WriteEpilogue(*y->producer, {{"Gelu"}, {"Add"}});
  b.Output(y);
  ExpectMatchesReference(b.Build());
}

TEST(CpuEnginePool, MaxAverageGlobal) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 5, 11, 11});
  b.Output(b.Op("MaxPool", {x}, {{"kernel_shape", Ints({3, 3})}, {"strides", Ints({2, 2})},
                                 {"pads", Ints({1, 1, 1, 1})}, {"ceil_mode", Attribute::Int(1)}}));
  b.Output(b.Op("AveragePool", {x}, {{"kernel_shape", Ints({3, 3})}, {"strides", Ints({2, 2})},
                                     {"pads", Ints({1, 1, 1, 1})}}));
  b.Output(b.Op("AveragePool", {x}, {{"kernel_shape", Ints({2, 3})},
                                     {"pads", Ints({1, 1, 0, 1})},
                                     {"count_include_pad", Attribute::Int(1)}}));
  b.Output(b.Op("GlobalAveragePool", {x}));
  ExpectMatchesReference(b.Build());
}

TEST(CpuEngineFallback, UnfastOpsRunOnTheReference) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {3, 4, 5});
  Value* t = b.Op("Transpose", {x}, {{"perm", Ints({2, 0, 1})}});
  b.Output(b.Op("ReduceLogSumExp", {t}, {{"keepdims", Attribute::Int(0)}}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/2);
  ASSERT_TRUE(o.engine);
  EXPECT_GE(o.engine->info().fallback_ops, 1);
  EXPECT_FALSE(o.engine->info().fallback_op_types.empty());
}

TEST(CpuEngineFallback, FusedElementwiseProgramAtO2) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4, 33});
  Value* y = b.Input("y", DType::kFloat32, {33});
  Value* s = b.Op("Sigmoid", {b.Op("Add", {x, y})});
  b.Output(b.Op("Mul", {s, b.Op("Tanh", {x})}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0, OptLevel::kO2);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.compiled.report.op_types_after.count("ai.kiln.FusedElementwise"), 1u);
}

std::unique_ptr<runtime::Engine> SmallConvEngine(CompiledGraph& keep) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 4, 8, 8});
  Value* w = b.Constant("w", Random({8, 4, 3, 3}, 19));
  b.Output(b.Op("Relu", {b.Op("Conv", {x, w}, {{"pads", Ints({1, 1, 1, 1})}})}));
  auto g = b.Build();
  keep = std::move(*CompileGraph(*g, {}));
  return std::move(*cpu::BuildCpuEngine(keep, {}));
}

TEST(CpuEngineInputs, WrongShapeDtypeOrCountIsInvalidArgument) {
  CompiledGraph keep;
  auto engine = SmallConvEngine(keep);
  std::vector<Tensor> outs;
  EXPECT_TRUE(absl::IsInvalidArgument(
      engine->Run({Tensor(DType::kFloat32, {1, 4, 8, 9})}, outs)));
  EXPECT_TRUE(absl::IsInvalidArgument(engine->Run({Tensor(DType::kInt64, {1, 4, 8, 8})}, outs)));
  EXPECT_TRUE(absl::IsInvalidArgument(engine->Run({}, outs)));
  EXPECT_TRUE(engine->Run({Tensor(DType::kFloat32, {1, 4, 8, 8})}, outs).ok());
  EXPECT_EQ(engine->info().fallback_ops, 0);
  EXPECT_GT(engine->info().arena_bytes, 0);
}

// Concat of convolution outputs along channels, then a convolution: in the blocked layout
// (whole blocks) and channels-last the concat works in the convolutions' layout, so the
// only reorder left is at the graph's input and output. Channel counts that are not whole
// blocks take the plain concat, through reorders, with the same answers.
TEST(CpuEngineSteadyState, RunAllocatesNothingAfterTheFirstCall) {
  // Own kernels only (view, element-wise, softmax, layer norm, transpose).
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 6, 4});
  Value* r = b.Op("Reshape", {x, b.Constant("s", Tensor::FromInt64({12, 4}, {2}))});
  Value* e = b.Op("Sigmoid", {b.Op("Add", {r, b.Constant("c", Random({4}, 22))})});
  Value* n = b.Op("LayerNormalization", {b.Op("Softmax", {e}), b.Constant("g", Random({4}, 23))});
  b.Output(b.Op("Transpose", {n}));
  auto g = b.Build();
  CompiledGraph keep = std::move(*CompileGraph(*g, {}));
  auto engine = std::move(*cpu::BuildCpuEngine(keep, {}));
  ASSERT_EQ(engine->info().fallback_ops, 0);
  std::vector<Tensor> ins = {Random({2, 6, 4}, 20)}, outs;
  ASSERT_TRUE(engine->Run(ins, outs).ok());
  const long before = g_allocs.load();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(engine->Run(ins, outs).ok());
  EXPECT_EQ(g_allocs.load() - before, 0);
}

TEST(CpuEngineSteadyState, QuantizeKernelsAllocateNothing) {
  // Q/DQ own kernels (constant per tensor, run-time per axis) and a fused QDQ program (O2).
  GraphBuilder b;
  Value* q = b.Input("q", DType::kUInt8, {2, 3, 8});
  Value* s = b.Input("s", DType::kFloat32, {3});
  Value* z = b.Input("z", DType::kUInt8, {3});
  auto scalar_u8 = [&](const char* name, int64_t v) {
    Tensor t(DType::kUInt8, {});
    t.mutable_data<uint8_t>()[0] = static_cast<uint8_t>(v);
    return b.Constant(name, t);
  };
  Value* d = b.Op("DequantizeLinear", {q, s, z});  // per axis 1, run-time parameters
  Value* e = b.Op("DequantizeLinear", {q, b.Constant("s1", Tensor::FromFloat({0.5f})), scalar_u8("z1", 7)});
  Value* r = b.Op("Relu", {b.Op("Add", {e, d})});
  b.Output(b.Op("QuantizeLinear", {r, b.Constant("s2", Tensor::FromFloat({0.25f})), scalar_u8("z2", 3)}));
  auto g = b.Build();
  CompileOptions co;
  co.pipeline.level = OptLevel::kO2;
  CompiledGraph keep = std::move(*CompileGraph(*g, co));
  EXPECT_EQ(keep.report.op_types_after.count("ai.kiln.FusedElementwise"), 1u);
  auto engine = std::move(*cpu::BuildCpuEngine(keep, {}));
  ASSERT_EQ(engine->info().fallback_ops, 0);
  Tensor qt(DType::kUInt8, {2, 3, 8}), zt(DType::kUInt8, {3});
  for (int64_t i = 0; i < qt.numel(); ++i) qt.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(i * 11);
  std::vector<Tensor> ins, outs;
  for (const auto& spec : engine->inputs()) {
    ins.push_back(spec.name == "q" ? qt : spec.name == "z" ? zt : Tensor::FromFloat({0.1f, 0.2f, 0.3f}, {3}));
  }
  ASSERT_TRUE(engine->Run(ins, outs).ok());
  const long before = g_allocs.load();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(engine->Run(ins, outs).ok());
  EXPECT_EQ(g_allocs.load() - before, 0);
}

// Conv (residual sum + ReLU, blocked reorders in the blocked layout), pools, Gemm, Softmax:
// every oneDNN primitive kind the engine executes.
std::unique_ptr<Graph> OneDnnMixGraph() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 4, 8, 8});
  Value* c1 = b.Op("Relu", {b.Op("Conv", {x, b.Constant("w1", Random({16, 4, 3, 3}, 40))},
                                 {{"pads", Ints({1, 1, 1, 1})}})});
  Value* c2 = b.Op("Conv", {c1, b.Constant("w2", Random({16, 16, 1, 1}, 41))});
  Value* r = b.Op("Relu", {b.Op("Add", {c2, c1})});
  Value* p = b.Op("MaxPool", {r}, {{"kernel_shape", Ints({2, 2})}, {"strides", Ints({2, 2})}});
  Value* f = b.Op("Flatten", {b.Op("GlobalAveragePool", {p})});
  Value* y = b.Op("Gemm", {f, b.Constant("wf", Random({16, 10}, 42)),
                           b.Constant("bf", Random({10}, 43))});
  b.Output(b.Op("Softmax", {y}));
  return b.Build();
}

TEST(CpuEngineThreads, TheTeamSizeIsFixedAtBuildAndReported) {
  CompiledGraph keep;
  auto g = OneDnnMixGraph();
  keep = std::move(*CompileGraph(*g, {}));
  cpu::CpuEngineOptions eo;
  eo.threads = 1;
  EXPECT_EQ((*cpu::BuildCpuEngine(keep, eo))->info().threads, 1);
  eo.threads = 2;
  eo.tune_threads = false;  // no one-thread candidate: the team as asked
  auto two = std::move(*cpu::BuildCpuEngine(keep, eo));
  EXPECT_EQ(two->info().threads, 2);
  // Running another engine on this thread does not change this one's team.
  omp_set_num_threads(1);
  std::vector<Tensor> outs;
  ASSERT_TRUE(two->Run({Random({2, 4, 8, 8}, 45)}, outs).ok());
  EXPECT_EQ(omp_get_max_threads(), 2);
}

TEST(CpuEngineSteadyState, OneDnnEngineAllocatesNothingInEitherLayout) {
  for (auto layout : {cpu::ActivationLayout::kPrimitive, cpu::ActivationLayout::kBlocked}) {
    SCOPED_TRACE(cpu::ActivationLayoutName(layout));
    auto g = OneDnnMixGraph();
    CompiledGraph keep = std::move(*CompileGraph(*g, {}));
    cpu::CpuEngineOptions eo;
    eo.layout = layout;
    auto engine = std::move(*cpu::BuildCpuEngine(keep, eo));
    ASSERT_EQ(engine->info().fallback_ops, 0);
    std::vector<Tensor> ins = {Random({2, 4, 8, 8}, 44)}, outs;
    ASSERT_TRUE(engine->Run(ins, outs).ok());
    const long before = g_allocs.load();
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(engine->Run(ins, outs).ok());
    EXPECT_EQ(g_allocs.load() - before, 0);
  }
}

// The negative: the first Run (no warm-up and no layout or thread tuning, so outside the
// transient heap) does reach malloc through oneDNN: the zero above is the heap's doing, and the counter
// sees these calls.
TEST(CpuEngineSteadyState, CounterSeesOneDnnAllocationsOutsideTheHeap) {
  auto g = OneDnnMixGraph();
  CompiledGraph keep = std::move(*CompileGraph(*g, {}));
  cpu::CpuEngineOptions eo;
  eo.warm_up = false;
  eo.layout = cpu::ActivationLayout::kPrimitive;
  eo.tune_threads = false;
  auto engine = std::move(*cpu::BuildCpuEngine(keep, eo));
  std::vector<Tensor> ins = {Random({2, 4, 8, 8}, 44)}, outs = {};
  outs.resize(1);
  outs[0] = Tensor(DType::kFloat32, {2, 10});
  const long before = g_allocs.load();
  ASSERT_TRUE(engine->Run(ins, outs).ok());
  EXPECT_GT(g_allocs.load() - before, 0);
}

}  // namespace
}  // namespace kiln
