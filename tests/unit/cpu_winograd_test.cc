// 3x3 convolutions on oneDNN's Winograd kernel (CpuEngineOptions::winograd, dnnl_conv.cc):
// chosen where oneDNN's heuristic takes it (AVX-512, a batch of 4 or more), within the
// check's tolerance of the reference, and guarded: a non-finite input runs the direct exact
// path, so a NaN marks exactly the outputs whose window holds it, not a whole transformed
// tile. Below AVX-512 (or capped there) oneDNN has no float Winograd kernel: the tests that
// need one skip and say so.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "compiler/compile.h"
#include "ir/builder.h"
#include "ops/interpreter.h"
#include "runtime/backend.h"
#include "runtime/check/compare.h"
#include "runtime/cpu/cpu_engine.h"
#include "runtime/cpu/isa.h"
#include "tests/unit/blocked_cpu_engine.h"
#include "tests/unit/test_tensors.h"

namespace kiln {
namespace {

Tensor Random(const std::vector<int64_t>& shape, int seed) {
  return testing::SeededUniform(shape, static_cast<uint64_t>(seed));
}

const std::vector<int64_t> kInput = {4, 32, 14, 14};

// x -> Conv 3x3 (pads 1) + bias [-> Relu] -> y.
std::unique_ptr<Graph> Conv3x3(bool relu) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4, 32, 14, 14});
  Value* y = b.Op("Conv",
                  {x, b.Constant("w", Random({32, 32, 3, 3}, 1)), b.Constant("b", Random({32}, 2))},
                  {{"pads", Attribute::Ints({1, 1, 1, 1})}});
  if (relu) y = b.Op("Relu", {y});
  b.Output(y);
  return b.Build();
}

std::unique_ptr<runtime::Engine> Build(const Graph& g, bool winograd) {
  cpu::CpuEngineOptions eo;
  eo.winograd = winograd;
  eo.winograd_trial_ms = 0;  // oneDNN's heuristic alone (cpu_winograd_trial_test times them)
  return testing::BuildBlockedCpuEngine(g, eo);
}

check::Divergence AgainstReference(const Graph& g, runtime::Engine& engine, const Tensor& x) {
  auto want = ref::Run(g, {{"x", x}});
  EXPECT_TRUE(want.ok()) << want.status();
  std::vector<Tensor> out;
  EXPECT_TRUE(engine.Run({x}, out).ok());
  return check::CompareTensors(out[0], want->at(engine.outputs()[0].name), {1e-3, 1e-4});
}

bool HasFloatWinograd() { return cpu::ActiveIsa() == cpu::Isa::kAvx512; }

TEST(CpuWinograd, ChosenAtABatchOfFourAndWithinTheReferenceTolerance) {
  if (!HasFloatWinograd()) GTEST_SKIP() << "no AVX-512 here (or capped): no Winograd kernel";
  for (bool relu : {false, true}) {
    SCOPED_TRACE(relu ? "with Relu" : "plain");
    auto g = Conv3x3(relu);
    auto wino = Build(*g, true);
    auto direct = Build(*g, false);
    ASSERT_TRUE(wino && direct);
    EXPECT_EQ(wino->info().winograd_ops, 1);
    EXPECT_EQ(direct->info().winograd_ops, 0);
    const Tensor x = Random(kInput, 3);
    const check::Divergence d = AgainstReference(*g, *wino, x);
    EXPECT_TRUE(d.ok) << d.message;
    EXPECT_LT(d.norm_rel_err, 1e-5);
  }
}

TEST(CpuWinograd, NeverForAStridedOrGroupedWindow) {
  for (const bool grouped : {false, true}) {
    SCOPED_TRACE(grouped ? "grouped" : "strided");
    GraphBuilder b;
    Value* x = b.Input("x", DType::kFloat32, {4, 32, 14, 14});
    std::map<std::string, Attribute> attrs = {{"pads", Attribute::Ints({1, 1, 1, 1})}};
    if (grouped) {
      attrs["group"] = Attribute::Int(2);
    } else {
      attrs["strides"] = Attribute::Ints({2, 2});
    }
    b.Output(b.Op("Conv", {x, b.Constant("w", Random({32, grouped ? 16 : 32, 3, 3}, 4))}, attrs));
    auto g = b.Build();
    auto engine = Build(*g, true);
    ASSERT_TRUE(engine);
    EXPECT_EQ(engine->info().winograd_ops, 0);
    const check::Divergence d = AgainstReference(*g, *engine, Random(kInput, 5));
    EXPECT_TRUE(d.ok) << d.message;
  }
}

// The backend's option (a model's `cpu_winograd: false`) reaches the engine; so does
// KILN_CPU_WINOGRAD=heuristic (no timing: oneDNN's heuristic takes Winograd at batch 4).
TEST(CpuWinograd, TheBackendOptionTurnsItOff) {
  if (!HasFloatWinograd()) GTEST_SKIP() << "no AVX-512 here (or capped): no Winograd kernel";
  ASSERT_EQ(setenv("KILN_CPU_WINOGRAD", "heuristic", 1), 0);
  auto g = Conv3x3(false);
  CompileOptions co;
  auto compiled = CompileGraph(*g, co);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto backend = runtime::FindBackend("cpu");
  ASSERT_TRUE(backend.ok());
  for (bool on : {true, false}) {
    runtime::BuildOptions o;
    o.layout = "blocked";
    o.threads = 2;
    o.winograd = on;
    auto engine = (*backend)->Build("cpu", *compiled, o);
    ASSERT_TRUE(engine.ok()) << engine.status();
    EXPECT_EQ((*engine)->info().winograd_ops, on ? 1 : 0);
  }
  unsetenv("KILN_CPU_WINOGRAD");
}

// One NaN and one infinity in the input: the direct convolution makes NaN of the 3x3
// windows holding them; an unguarded Winograd kernel would make NaN of whole 4x4 output
// tiles around them (outputs the reference keeps finite).
TEST(CpuWinograd, NonFiniteInputsTakeTheDirectPath) {
  if (!HasFloatWinograd()) GTEST_SKIP() << "no AVX-512 here (or capped): no Winograd kernel";
  for (bool relu : {false, true}) {
    SCOPED_TRACE(relu ? "with Relu" : "plain");
    auto g = Conv3x3(relu);
    auto wino = Build(*g, true);
    ASSERT_TRUE(wino);
    ASSERT_EQ(wino->info().winograd_ops, 1);
    Tensor x = Random(kInput, 6);
    x.mutable_data<float>()[5 * 14 + 6] = std::numeric_limits<float>::quiet_NaN();
    x.mutable_data<float>()[2 * 32 * 196 + 9 * 14 + 9] = std::numeric_limits<float>::infinity();
    const check::Divergence d = AgainstReference(*g, *wino, x);
    EXPECT_TRUE(d.ok) << d.message;
    // Then finite again: the fast path serves the next run.
    const check::Divergence after = AgainstReference(*g, *wino, Random(kInput, 7));
    EXPECT_TRUE(after.ok) << after.message;
  }
}

// x [4, 32, 14, 14] -> Conv 3x3 (pads 1) to `out` channels + bias -> `act` -> y, where act is
// "SiLU" (y * Sigmoid(y), fused as one step) or "Sigmoid".
std::unique_ptr<Graph> Conv3x3Then(const std::string& act, int64_t out) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4, 32, 14, 14});
  Value* y = b.Op(
      "Conv", {x, b.Constant("w", Random({out, 32, 3, 3}, 8)), b.Constant("b", Random({out}, 9))},
      {{"pads", Attribute::Ints({1, 1, 1, 1})}});
  Value* s = b.Op("Sigmoid", {y});
  b.Output(act == "SiLU" ? b.Op("Mul", {y, s}) : s);
  return b.Build();
}

// oneDNN 2.6's Winograd kernel takes ReLU as a post-op but not SiLU or Sigmoid: the kernel
// runs without them and they run after it on dst (ConvGeometry::after), within
// the tolerance of the reference, and a non-finite input still takes the direct exact path.
TEST(CpuWinograd, ActivationsItDoesNotTakeRunAfterIt) {
  if (!HasFloatWinograd()) GTEST_SKIP() << "no AVX-512 here (or capped): no Winograd kernel";
  for (const char* act : {"SiLU", "Sigmoid"}) {
    SCOPED_TRACE(act);
    auto g = Conv3x3Then(act, 32);
    auto wino = Build(*g, true);
    ASSERT_TRUE(wino);
    EXPECT_EQ(wino->info().winograd_ops, 1);
    EXPECT_EQ(wino->info().activations_after, 1);
    const check::Divergence d = AgainstReference(*g, *wino, Random(kInput, 10));
    EXPECT_TRUE(d.ok) << d.message;
    EXPECT_LT(d.norm_rel_err, 1e-5);
    Tensor x = Random(kInput, 11);
    x.mutable_data<float>()[3 * 14 + 4] = std::numeric_limits<float>::quiet_NaN();
    const check::Divergence nan = AgainstReference(*g, *wino, x);
    EXPECT_TRUE(nan.ok) << nan.message;
  }
}

// 24 output channels fill 32 in the blocked layout, and the padding must stay zero: SiLU
// (0 -> 0) still runs after Winograd, Sigmoid (0 -> 0.5) keeps the direct kernel with its
// post-op (it would write 0.5 into the padding).
TEST(CpuWinograd, AnActivationAfterItMustKeepBlockedPaddingZero) {
  if (!HasFloatWinograd()) GTEST_SKIP() << "no AVX-512 here (or capped): no Winograd kernel";
  for (const char* act : {"SiLU", "Sigmoid"}) {
    SCOPED_TRACE(act);
    auto g = Conv3x3Then(act, 24);
    auto engine = Build(*g, true);
    ASSERT_TRUE(engine);
    EXPECT_EQ(engine->info().winograd_ops, std::string(act) == "SiLU" ? 1 : 0);
    const check::Divergence d = AgainstReference(*g, *engine, Random(kInput, 12));
    EXPECT_TRUE(d.ok) << d.message;
  }
}

}  // namespace
}  // namespace kiln
