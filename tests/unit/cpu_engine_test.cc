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

using kiln_ops::EpilogueStep;

Tensor Random(std::vector<int64_t> shape, uint64_t seed, float scale = 1.f) {
  Tensor t(DType::kFloat32, shape);
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    p[i] = scale * (static_cast<float>((s >> 33) % 20001) / 10000.f - 1.f);
  }
  return t;
}

struct Outcome {
  CompiledGraph compiled;
  std::unique_ptr<runtime::Engine> engine;
};

// Builds the engine in `layout`, runs it and the reference on the same random inputs, and
// compares every output (rtol 1e-4, atol 1e-5).
void ExpectEngineMatches(Outcome& o, cpu::ActivationLayout layout, int max_fallbacks) {
  SCOPED_TRACE(cpu::ActivationLayoutName(layout));
  cpu::CpuEngineOptions eo;
  eo.layout = layout;
  auto e = cpu::BuildCpuEngine(o.compiled, eo);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return;
  o.engine = std::move(*e);
  EXPECT_EQ(o.engine->info().layout, cpu::ActivationLayoutName(layout));
  EXPECT_LE(o.engine->info().fallback_ops, max_fallbacks);
  auto feeds = check::RandomInputs(*o.compiled.graph, {});
  EXPECT_TRUE(feeds.ok()) << feeds.status();
  auto want = ref::Run(*o.compiled.graph, *feeds);
  EXPECT_TRUE(want.ok()) << want.status();
  std::vector<Tensor> ins, outs;
  for (const auto& spec : o.engine->inputs()) ins.push_back(feeds->at(spec.name));
  absl::Status st = o.engine->Run(ins, outs);
  EXPECT_TRUE(st.ok()) << st;
  if (!st.ok() || !want.ok()) return;
  // A run writes every output whole: outputs handed in full of NaN (a reused buffer's old
  // bytes) come back as the first run's, bit for bit.
  std::vector<Tensor> again;
  for (const Tensor& t : outs) {
    Tensor poisoned = t.Clone();
    if (poisoned.dtype() == DType::kFloat32) {
      std::fill_n(poisoned.mutable_data<float>(), poisoned.numel(), std::nanf(""));
    }
    again.push_back(std::move(poisoned));
  }
  ASSERT_TRUE(o.engine->Run(ins, again).ok());
  for (size_t k = 0; k < outs.size(); ++k) {
    EXPECT_EQ(std::memcmp(again[k].raw(), outs[k].raw(), outs[k].nbytes()), 0)
        << "output " << k << " depends on what its buffer held before the run";
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    const Tensor& w = want->at(o.engine->outputs()[k].name);
    EXPECT_EQ(outs[k].shape(), w.shape());
    if (outs[k].shape() != w.shape()) continue;
    int bad = 0;
    for (int64_t i = 0; i < w.numel() && bad < 3; ++i) {
      const double a = outs[k].GetDouble(i), b = w.GetDouble(i);
      const bool ok = std::abs(a - b) <= 1e-5 + 1e-4 * std::abs(b);
      bad += !ok;
      EXPECT_TRUE(ok) << "output " << k << " element " << i << ": engine " << a
                      << " reference " << b;
    }
  }
}

// Compiles (O0 by default: the nodes as built) and checks the engine in both activation
// layouts against the reference; the returned engine is the primitive-layout one.
Outcome ExpectMatchesReference(std::unique_ptr<Graph> g, int max_fallbacks = 0,
                               OptLevel level = OptLevel::kO0) {
  Outcome o;
  CompileOptions co;
  co.pipeline.level = level;
  absl::StatusOr<CompiledGraph> c = CompileGraph(*g, co);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return o;
  o.compiled = std::move(*c);
  ExpectEngineMatches(o, cpu::ActivationLayout::kBlocked, max_fallbacks);
  ExpectEngineMatches(o, cpu::ActivationLayout::kPrimitive, max_fallbacks);
  return o;
}

Attribute Ints(std::vector<int64_t> v) { return Attribute::Ints(std::move(v)); }

Value* FusedConv(GraphBuilder& b, std::vector<Value*> in, std::map<std::string, Attribute> attrs,
                 const std::vector<EpilogueStep>& steps) {
  b.graph().opsets[kKilnDomain] = 1;
  Value* y = b.Op("FusedConv", std::move(in), std::move(attrs), kKilnDomain);
  kiln_ops::WriteEpilogue(*y->producer, steps);
  return y;
}

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

TEST(CpuEngineOwnKernels, ElementwiseBroadcastClipAndStrides) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {3, 1, 300});  // tiles cross 256
  Value* y = b.Input("y", DType::kFloat32, {4, 1});
  Value* lo = b.Constant("lo", Tensor::FromFloat({-0.3f}));
  Value* hi = b.Constant("hi", Tensor::FromFloat({0.4f}));
  b.Output(b.Op("Clip", {b.Op("Mul", {x, y}), lo, hi}));
  b.Output(b.Op("Sub", {y, x}));
  b.Output(b.Op("Erf", {x}));
  ExpectMatchesReference(b.Build());
}

TEST(CpuEngineOwnKernels, ElementwiseSplitsLargeOutputsAcrossThreads) {
  // Above the parallel threshold in both walks: packed short rows ([2048, 40]) and long rows
  // ([3, 40000]), with broadcast operands and a fused program (O2) that runs in place.
  GraphBuilder b;
  Value* s = b.Input("s", DType::kFloat32, {2048, 40});
  Value* col = b.Input("col", DType::kFloat32, {2048, 1});
  Value* l = b.Input("l", DType::kFloat32, {3, 40000});
  Value* row = b.Input("row", DType::kFloat32, {40000});
  b.Output(b.Op("Tanh", {b.Op("Mul", {b.Op("Add", {s, col}), s})}));
  b.Output(b.Op("Sigmoid", {b.Op("Sub", {l, row})}));
  b.Output(b.Op("Mul", {col, b.Op("Transpose", {b.Op("Reshape", {s, b.Constant("sh", Tensor::FromInt64({40, 2048}, {2}))})})}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0, OptLevel::kO2);
  ASSERT_TRUE(o.engine);
  EXPECT_GE(o.compiled.report.op_types_after.count("ai.kiln.FusedElementwise"), 1u);
}

TEST(CpuEngineOwnKernels, SoftmaxLayerNormTransposeGather) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 5, 6});
  Value* ids = b.Input("ids", DType::kInt64, {2, 3});
  b.Output(b.Op("Softmax", {x}, {{"axis", Attribute::Int(1)}}));
  b.Output(b.Op("Softmax", {x}));
  b.Output(b.Op("LayerNormalization", {x, b.Constant("g", Random({6}, 30)),
                                       b.Constant("bb", Random({6}, 31))},
                {{"epsilon", Attribute::Float(1e-3f)}}));
  b.Output(b.Op("Transpose", {x}, {{"perm", Ints({1, 2, 0})}}));
  b.Output(b.Op("Concat", {x, b.Constant("k", Random({2, 2, 6}, 33)), x},
                {{"axis", Attribute::Int(1)}}));
  // Random int64 inputs are 0..10: the table has 12 rows.
  b.Output(b.Op("Gather", {b.Constant("tab", Random({3, 12, 2}, 32)), ids},
                {{"axis", Attribute::Int(1)}}));
  ExpectMatchesReference(b.Build());
}

TEST(CpuEngineOwnKernels, ReductionsOverAnyAxesKeptOrNot) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {3, 4, 5, 6});
  Value* big = b.Input("big", DType::kFloat32, {64, 32, 40});  // splits across threads
  int n = 0;
  auto reduce = [&](const char* op, Value* in, std::vector<int64_t> axes, int keepdims) {
    const int64_t count = static_cast<int64_t>(axes.size());
    Value* a = b.Constant("axes" + std::to_string(n++), Tensor::FromInt64(axes, {count}));
    b.Output(b.Op(op, {in, a}, {{"keepdims", Attribute::Int(keepdims)}}));
  };
  reduce("ReduceSum", x, {1}, 1);
  reduce("ReduceMean", x, {2, 3}, 0);
  reduce("ReduceMax", x, {0, 2}, 1);
  reduce("ReduceMin", x, {-1}, 0);
  reduce("ReduceProd", x, {1, 3}, 1);
  reduce("ReduceSumSquare", x, {0, 1, 2, 3}, 0);
  reduce("ReduceL1", x, {0, 3}, 1);
  reduce("ReduceL2", x, {0}, 0);
  reduce("ReduceLogSum", b.Op("Exp", {x}), {2}, 1);
  reduce("ReduceMean", big, {2}, 1);
  reduce("ReduceSum", big, {1}, 0);
  reduce("ReduceMax", big, {0}, 0);
  // No axes: everything, unless noop_with_empty_axes (then each element alone: squared).
  b.Output(b.Op("ReduceMean", {x}, {{"keepdims", Attribute::Int(0)}}));
  b.Output(b.Op("ReduceSumSquare", {x}, {{"noop_with_empty_axes", Attribute::Int(1)}}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 0);
}

TEST(CpuEngineOwnKernels, SliceWithStepsAxesAndClamping) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4, 7, 6});
  Value* ids = b.Input("ids", DType::kInt64, {3, 9});
  int n = 0;
  auto c = [&](std::vector<int64_t> v) {
    const int64_t size = static_cast<int64_t>(v.size());
    return b.Constant("c" + std::to_string(n++), Tensor::FromInt64(v, {size}));
  };
  b.Output(b.Op("Slice", {x, c({1, 0}), c({3, 100}), c({0, 2}), c({1, 2})}));   // ends clamp
  b.Output(b.Op("Slice", {x, c({-1}), c({-100}), c({1}), c({-2})}));           // backwards
  b.Output(b.Op("Slice", {x, c({0, -3}), c({2, 6})}));                          // default axes
  b.Output(b.Op("Slice", {ids, c({2}), c({8}), c({-1}), c({3})}));             // int64, axis -1
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 0);
}

TEST(CpuEngineOwnKernels, CastSaturatesTruncatesAndKeepsNaNRules) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4, 5});
  Value* ids = b.Input("ids", DType::kInt64, {4, 5});
  Value* m = b.Input("m", DType::kBool, {4, 5});
  auto cast = [&](Value* v, int to) { return b.Op("Cast", {v}, {{"to", Attribute::Int(to)}}); };
  Value* big = b.Op("Mul", {x, b.Constant("k", Tensor::FromFloat({1e10f}))});
  Value* nan = b.Op("Sqrt", {x});  // NaN for the negative half
  b.Output(cast(big, 6));    // float -> int32, saturating
  b.Output(cast(x, 7));      // float -> int64, toward zero
  b.Output(cast(nan, 7));    // NaN -> 0
  b.Output(cast(nan, 9));    // NaN -> true
  b.Output(cast(ids, 1));    // int64 -> float
  b.Output(cast(ids, 3));    // int64 -> int8
  b.Output(cast(m, 1));      // bool -> float
  b.Output(cast(x, 11));     // float -> double
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 0);
}

TEST(CpuEngineOwnKernels, FusedProgramsCastIntegerAndBoolInputsOnLoad) {
  // An attention mask's preprocessing, fused at O2: the int64 (and bool) inputs enter the
  // float program through its Cast instructions.
  GraphBuilder b;
  Value* mask = b.Input("mask", DType::kInt64, {2, 1, 1, 5});
  Value* keep = b.Input("keep", DType::kBool, {2, 1, 5, 1});
  Value* scores = b.Input("scores", DType::kFloat32, {2, 3, 5, 5});
  auto to_float = [&](Value* v) { return b.Op("Cast", {v}, {{"to", Attribute::Int(1)}}); };
  Value* one = b.Constant("one", Tensor::FromFloat({1.f}));
  Value* add = b.Op("Mul", {b.Op("Sub", {one, to_float(mask)}), b.Constant("neg", Tensor::FromFloat({-1e4f}))});
  Value* gated = b.Op("Mul", {b.Op("Add", {scores, add}), to_float(keep)});
  b.Output(b.Op("Softmax", {gated}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0, OptLevel::kO2);
  ASSERT_TRUE(o.engine);
  EXPECT_GE(o.compiled.report.op_types_after.count("ai.kiln.FusedElementwise"), 1u);
  EXPECT_EQ(o.compiled.report.op_types_after.count("Cast"), 0u);  // inside the program
}

TEST(CpuEngineOwnKernels, WhereBroadcastsAllThreeOperands) {
  GraphBuilder b;
  Value* c = b.Input("c", DType::kBool, {4, 1});
  Value* x = b.Input("x", DType::kFloat32, {1, 6});
  Value* cc = b.Input("cc", DType::kBool, {2, 4, 6});
  Value* ids = b.Input("ids", DType::kInt64, {4, 6});
  b.Output(b.Op("Where", {c, x, b.Constant("neg", Tensor::FromFloat({-1e9f}))}));
  b.Output(b.Op("Where", {cc, ids, b.Constant("z", Tensor::FromInt64({0, 1, 2, 3, 4, 5}, {6}))}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 0);
}

TEST(CpuEngineOwnKernels, SplitAndExpandAnyElementType) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4, 9, 3});
  Value* ids = b.Input("ids", DType::kInt64, {3, 1});
  Value* sizes = b.Constant("sizes", Tensor::FromInt64({2, 4, 3}, {3}));
  for (Value* part : b.OpN("Split", {x, sizes}, 3, {{"axis", Attribute::Int(1)}})) b.Output(part);
  b.Output(b.Op("Expand", {ids, b.Constant("shape", Tensor::FromInt64({2, 3, 5}, {3}))}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 0);
}

TEST(CpuEngineOwnKernels, PadEveryModeCropsAndAxes) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3, 4});
  Value* ids = b.Input("ids", DType::kInt64, {3, 5});
  int n = 0;
  auto c = [&](std::vector<int64_t> v) {
    const int64_t size = static_cast<int64_t>(v.size());
    return b.Constant("c" + std::to_string(n++), Tensor::FromInt64(v, {size}));
  };
  auto mode = [](const char* m) {
    return std::map<std::string, Attribute>{{"mode", Attribute::String(m)}};
  };
  Value* value = b.Constant("v", Tensor::Scalar(DType::kFloat32, 2.5));
  b.Output(b.Op("Pad", {x, c({0, 1, 2, 1, 0, 3}), value}, mode("constant")));
  b.Output(b.Op("Pad", {x, c({0, 2, 5, 0, 2, 6})}, mode("reflect")));  // wider than the axis
  b.Output(b.Op("Pad", {x, c({1, 0, 1, 1, 3, 2})}, mode("edge")));
  b.Output(b.Op("Pad", {x, c({0, 4, 1, 0, 1, 7})}, mode("wrap")));
  b.Output(b.Op("Pad", {x, c({0, -1, 2, 0, -1, -1})}, mode("constant")));  // crops too
  b.Output(b.Op("Pad", {x, c({0, -1, 2, 0, -2, -1})}, mode("reflect")));   // to nothing
  b.Output(b.Op("Pad", {x, c({1, 2}), nullptr, c({-1})}, mode("edge")));  // axes input
  b.Output(b.Op("Pad", {ids, c({1, 0, 0, 2})}, mode("reflect")));             // int64
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 0);
}

// A constant value fed at run time has no bytes at build: the reference runs that Pad.
TEST(CpuEngineOwnKernels, PadWithARuntimeValueFallsBack) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3});
  Value* value = b.Input("value", DType::kFloat32, {});
  b.Output(b.Op("Pad", {x, b.Constant("p", Tensor::FromInt64({1, 0, 0, 2}, {4})), value}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/1);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 1);
}

// Resize with constant scales/sizes runs the reference's own taps: nearest on any dtype,
// linear and cubic on float32, each coordinate transform, antialias and extrapolation.
TEST(CpuEngineOwnKernels, ResizeModesAndCoordinateTransforms) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 2, 5, 6});
  Value* ids = b.Input("ids", DType::kInt64, {2, 3, 4});
  int n = 0;
  auto floats = [&](std::vector<float> v) {
    const int64_t size = static_cast<int64_t>(v.size());
    return b.Constant("f" + std::to_string(n++), Tensor::FromFloat(v, {size}));
  };
  auto sizes = [&](std::vector<int64_t> v) {
    const int64_t size = static_cast<int64_t>(v.size());
    return b.Constant("s" + std::to_string(n++), Tensor::FromInt64(v, {size}));
  };
  using A = std::map<std::string, Attribute>;
  auto s = [](const char* v) { return Attribute::String(v); };
  Value* none = nullptr;
  b.Output(b.Op("Resize", {x, none, floats({1, 1, 2, 1.5f})},
                A{{"mode", s("nearest")}, {"coordinate_transformation_mode", s("asymmetric")},
                  {"nearest_mode", s("floor")}}));
  b.Output(b.Op("Resize", {x, none, none, sizes({1, 2, 9, 4})}, A{{"mode", s("linear")}}));
  b.Output(b.Op("Resize", {x, none, floats({1, 1, 0.6f, 0.5f})},
                A{{"mode", s("linear")}, {"antialias", Attribute::Int(1)}}));
  b.Output(b.Op("Resize", {x, none, none, sizes({1, 2, 7, 8})},
                A{{"mode", s("cubic")}, {"coordinate_transformation_mode", s("align_corners")}}));
  b.Output(b.Op("Resize", {x, floats({0, 0, 0.2f, 0.1f, 1, 1, 1.3f, 0.9f}), none,
                           sizes({1, 2, 4, 4})},
                A{{"mode", s("linear")}, {"coordinate_transformation_mode", s("tf_crop_and_resize")},
                  {"extrapolation_value", Attribute::Float(-3.f)}}));
  b.Output(b.Op("Resize", {ids, none, floats({2, 0.5f, 1.5f})}, A{{"mode", s("nearest")}}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 0);
}

// Linear interpolation of integers (rounded and saturated by the reference's rules) stays on
// the reference kernel; nearest on the same integers does not.
TEST(CpuEngineOwnKernels, ResizeTheKernelLeavesToTheReference) {
  GraphBuilder b;
  Value* ids = b.Input("ids", DType::kInt32, {1, 1, 4, 4});
  Value* none = nullptr;
  Value* sizes = b.Constant("sizes", Tensor::FromInt64({1, 1, 6, 6}, {4}));
  b.Output(b.Op("Resize", {ids, none, none, sizes}, {{"mode", Attribute::String("linear")}}));
  b.Output(b.Op("Resize", {ids, none, none, sizes}, {{"mode", Attribute::String("nearest")}}));
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/1);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 1);
}

// RNN, GRU and LSTM with constant weights run the own recurrent kernel: directions, layouts,
// sequence lengths, initial states, clip, peepholes, input_forget, linear_before_reset and
// activations with alpha/beta, against the reference.
TEST(CpuEngineOwnKernels, RecurrentCellsEveryForm) {
  GraphBuilder b;
  const int64_t T = 10, B = 3, I = 4, H = 6;  // lengths are drawn from [0, 10]
  Value* x = b.Input("x", DType::kFloat32, {T, B, I});
  Value* xb = b.Input("xb", DType::kFloat32, {B, T, I});  // batch first
  Value* lens = b.Input("lens", DType::kInt32, {B});
  Value* h0 = b.Input("h0", DType::kFloat32, {2, B, H});
  Value* c0 = b.Input("c0", DType::kFloat32, {2, B, H});
  int n = 0;
  auto w = [&](std::vector<int64_t> shape) {
    ++n;
    return b.Constant("w" + std::to_string(n), Random(shape, 100 + n, 0.5f));
  };
  using A = std::map<std::string, Attribute>;
  auto str = [](const char* v) { return Attribute::String(v); };
  Value* none = nullptr;
  // LSTM: bidirectional, lengths, initial states, peepholes, clip.
  for (Value* o : b.OpN("LSTM", {x, w({2, 4 * H, I}), w({2, 4 * H, H}), w({2, 8 * H}), lens, h0,
                                 c0, w({2, 3 * H})},
                        3, A{{"hidden_size", Attribute::Int(H)},
                             {"direction", str("bidirectional")},
                             {"clip", Attribute::Float(2.5f)}})) {
    b.Output(o);
  }
  // LSTM, batch first, input_forget, reverse, only Y_h.
  b.Output(b.OpN("LSTM", {xb, w({1, 4 * H, I}), w({1, 4 * H, H})}, 2,
                 A{{"hidden_size", Attribute::Int(H)}, {"layout", Attribute::Int(1)},
                   {"direction", str("reverse")}, {"input_forget", Attribute::Int(1)}})[1]);
  // GRU both ways of the reset gate.
  for (int64_t lbr : {0, 1}) {
    for (Value* o : b.OpN("GRU", {x, w({1, 3 * H, I}), w({1, 3 * H, H}), w({1, 6 * H}), lens},
                          2, A{{"hidden_size", Attribute::Int(H)},
                               {"linear_before_reset", Attribute::Int(lbr)}})) {
      b.Output(o);
    }
  }
  // RNN with a parameterized activation per direction.
  b.Output(b.OpN("RNN", {x, w({2, H, I}), w({2, H, H}), none, none, h0}, 2,
                 A{{"hidden_size", Attribute::Int(H)}, {"direction", str("bidirectional")},
                   {"activations", Attribute::Strings({"LeakyRelu", "ScaledTanh"})},
                   {"activation_alpha", Attribute::Floats({0.2f, 0.9f})},
                   {"activation_beta", Attribute::Floats({0.f, 1.1f})}})[0]);
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 0);
}

// Weights computed at run time (not constants) leave the cell to the reference.
TEST(CpuEngineOwnKernels, RecurrentWithRuntimeWeightsFallsBack) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {3, 2, 4});
  Value* wr = b.Input("w", DType::kFloat32, {1, 5, 4});
  Value* r = b.Constant("r", Random({1, 5, 5}, 7, 0.5f));
  b.Output(b.OpN("RNN", {x, wr, r}, 2, {{"hidden_size", Attribute::Int(5)}})[0]);
  Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/1);
  ASSERT_TRUE(o.engine);
  EXPECT_EQ(o.engine->info().fallback_ops, 1);
}

TEST(CpuEngineOwnKernels, ReductionsTheKernelLeavesToTheReference) {
  // LogSumExp (wants a max pass) and integer inputs.
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {3, 4});
  Value* ids = b.Input("ids", DType::kInt64, {3, 4});
  Value* axes = b.Constant("a", Tensor::FromInt64({1}, {1}));
  b.Output(b.Op("ReduceLogSumExp", {x, axes}));
  b.Output(b.Op("ReduceSum", {ids, axes}));
  auto g = b.Build();
  CompiledGraph keep = std::move(*CompileGraph(*g, {}));
  auto engine = cpu::BuildCpuEngine(keep, {});
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->info().fallback_ops, 2);
}

TEST(CpuEngineOwnKernels, GatherIndexOutOfRangeIsAnError) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4, 2});
  Value* ids = b.Input("ids", DType::kInt64, {1});
  b.Output(b.Op("Gather", {x, ids}));
  auto g = b.Build();
  CompiledGraph keep = std::move(*CompileGraph(*g, {}));
  auto engine = std::move(*cpu::BuildCpuEngine(keep, {}));
  std::vector<Tensor> outs;
  EXPECT_TRUE(absl::IsInvalidArgument(
      engine->Run({Random({4, 2}, 1), Tensor::FromInt64({7}, {1})}, outs)));
  EXPECT_TRUE(engine->Run({Random({4, 2}, 1), Tensor::FromInt64({-1}, {1})}, outs).ok());
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
    ASSERT_NEAR(from_second[0].GetDouble(i), r.GetDouble(i), 1e-4 + 1e-4 * std::abs(r.GetDouble(i)));
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
