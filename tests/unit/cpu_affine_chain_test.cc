// The element-wise kernel's one-pass scale/shift/ReLU (elementwise_affine.cc): which programs
// are such a chain (and which are not), that the pass gives the bits the instructions give one
// at a time (no fused multiply-add, NaN, infinities and signed zeros as ONNX has them) at the
// CPU's ISA level (and, in the .avx2 twin, capped to AVX2), and engines running it against the
// reference interpreter.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "compiler/compile.h"
#include "ir/builder.h"
#include "ops/interpreter.h"
#include "runtime/check/compare.h"
#include "runtime/cpu/cpu_engine.h"
#include "runtime/cpu/elementwise_ops.h"
#include "tests/unit/test_tensors.h"

namespace kiln::cpu::ew {
namespace {

Instr I(Op op, std::vector<int> args) { return Instr{op, std::move(args), 0.f, 0.f}; }

TEST(CpuAffineChain, MatchesScaleShiftReluInEitherOrder) {
  // Operands 0..2, results from 3.
  auto f = MatchAffineChain({I(Op::kMul, {0, 1}), I(Op::kAdd, {3, 2}), I(Op::kRelu, {4})}, 3);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->x, 0);
  EXPECT_EQ(f->scale, 1);
  EXPECT_EQ(f->shift, 2);
  EXPECT_FALSE(f->add_first);
  EXPECT_TRUE(f->relu);
  f = MatchAffineChain({I(Op::kAdd, {1, 0}), I(Op::kMul, {2, 3})}, 3);  // (b + x) * s
  ASSERT_TRUE(f);
  EXPECT_EQ(f->x, 1);
  EXPECT_EQ(f->shift, 0);
  EXPECT_EQ(f->scale, 2);
  EXPECT_TRUE(f->add_first);
  EXPECT_FALSE(f->relu);
  f = MatchAffineChain({I(Op::kAdd, {0, 1}), I(Op::kRelu, {2})}, 2);  // a residual's Add+Relu
  ASSERT_TRUE(f);
  EXPECT_EQ(f->scale, -1);
  EXPECT_EQ(f->shift, 1);
  EXPECT_TRUE(MatchAffineChain({I(Op::kMul, {0, 1}), I(Op::kRelu, {2})}, 2));
}

TEST(CpuAffineChain, OtherProgramsAreNotChains) {
  const std::vector<std::vector<Instr>> not_chains = {
      {I(Op::kMul, {0, 1})},                                             // one instruction
      {I(Op::kMul, {0, 1}), I(Op::kMul, {3, 2})},                        // two scales
      {I(Op::kMul, {0, 1}), I(Op::kAdd, {0, 2})},                        // Add reads x again
      {I(Op::kMul, {0, 1}), I(Op::kAdd, {3, 3})},                        // the product twice
      {I(Op::kSub, {0, 1}), I(Op::kRelu, {3})},                          // not Mul/Add
      {I(Op::kRelu, {0}), I(Op::kMul, {3, 1})},                          // ReLU first
      {I(Op::kMul, {0, 1}), I(Op::kRelu, {3}), I(Op::kAdd, {4, 2})},     // ReLU not last
      {I(Op::kMul, {0, 1}), I(Op::kAdd, {3, 2}), I(Op::kSigmoid, {4})},  // another activation
      {I(Op::kMul, {0, 1}), I(Op::kAdd, {3, 2}), I(Op::kRelu, {3})},     // ReLU of the product
      {I(Op::kMul, {0, 1}), I(Op::kAdd, {3, 2}), I(Op::kRelu, {4}), I(Op::kRelu, {5})},
  };
  for (size_t i = 0; i < not_chains.size(); ++i) {
    EXPECT_FALSE(MatchAffineChain(not_chains[i], 3)) << "program " << i;
  }
}

// Values that tell a fused multiply-add from two roundings, and every special value.
std::vector<float> Awkward(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng) * (1.f + 1e-7f);
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {std::nanf(""), inf, -inf, 0.f, -0.f, 1e-40f, -1e-40f, 3.4e38f};
  for (int i = 0; i < 8; ++i) v[static_cast<size_t>(i * 37 % n)] = specials[i];
  return v;
}

TEST(CpuAffineChain, OnePassGivesTheInstructionsBits) {
  const int n = 1000;  // not a multiple of any vector width: the tails too
  const std::vector<float> x = Awkward(n, 1), s = Awkward(n, 2), b = Awkward(n, 3);
  for (bool add_first : {false, true}) {
    for (bool relu : {false, true}) {
      for (int absent : {0, 1, 2}) {  // 1: no scale, 2: no shift (only with a ReLU)
        if (absent != 0 && (!relu || add_first)) continue;
        AffineChain f{0, absent == 1 ? -1 : 1, absent == 2 ? -1 : 2, add_first, relu};
        std::vector<float> want(x), tmp(static_cast<size_t>(n)), got(static_cast<size_t>(n));
        if (add_first) {
          Binary(Op::kAdd, x.data(), b.data(), tmp.data(), n);
          Binary(Op::kMul, tmp.data(), s.data(), want.data(), n);
        } else {
          if (f.scale >= 0) Binary(Op::kMul, want.data(), s.data(), want.data(), n);
          if (f.shift >= 0) Binary(Op::kAdd, want.data(), b.data(), want.data(), n);
        }
        if (relu) Unary(I(Op::kRelu, {0}), want.data(), want.data(), n);
        AffineTile(f, x.data(), f.scale >= 0 ? s.data() : nullptr,
                   f.shift >= 0 ? b.data() : nullptr, got.data(), n);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * n), 0)
            << "add_first " << add_first << " relu " << relu << " absent " << absent;
      }
    }
  }
  // In place (the memory plan may give the output the input's buffer).
  std::vector<float> in_place(x), want(static_cast<size_t>(n));
  AffineChain f{0, 1, 2, false, true};
  AffineTile(f, x.data(), s.data(), b.data(), want.data(), n);
  AffineTile(f, in_place.data(), s.data(), b.data(), in_place.data(), n);
  EXPECT_EQ(std::memcmp(in_place.data(), want.data(), sizeof(float) * n), 0);
}

// x [n, c, h, w] after a convolution and ReLU (so in the convolution's layout, and the scale
// does not fold into its weights) -> Mul(per-channel) -> Add(second) -> Relu, against the reference
// on the raw graph; `add_reads_x`: the Add reads the convolution's output again (not a chain: the
// kernel runs the instructions one at a time).
std::unique_ptr<Graph> ScaleShiftRelu(int64_t n, int64_t c, int64_t hw, bool add_reads_x) {
  GraphBuilder gb;
  Value* in = gb.Input("x", DType::kFloat32, {n, c, hw, hw});
  Value* x = gb.Op(
      "Relu", {gb.Op("Conv", {in, gb.Constant("w", testing::SeededUniform({c, c, 1, 1}, 1))})});
  Value* m = gb.Op("Mul", {x, gb.Constant("s", testing::SeededUniform({c, 1, 1}, 2))});
  Value* a =
      gb.Op("Add", {m, add_reads_x ? x : gb.Constant("b", testing::SeededUniform({c, 1, 1}, 3))});
  gb.Output(gb.Op("Relu", {a}));
  return gb.Build();
}

TEST(CpuAffineChain, EnginesMatchTheReferenceInEveryLayout) {
  for (bool add_reads_x : {false, true}) {
    for (int64_t c : {32, 24}) {  // 24: channels-last or plain, not whole 16-channel blocks
      auto g = ScaleShiftRelu(4, c, 20, add_reads_x);
      CompileOptions co;
      co.pipeline.level = OptLevel::kO2;
      auto compiled = CompileGraph(*g, co);
      ASSERT_TRUE(compiled.ok()) << compiled.status();
      int programs = 0;
      for (const auto& node : compiled->graph->nodes()) {
        programs += node->op_type == "FusedElementwise";
      }
      EXPECT_EQ(programs, 1);  // the three element-wise nodes, as one program
      Tensor x = testing::SeededUniform({4, c, 20, 20}, 4);
      x.mutable_data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
      auto want = ref::Run(*g, {{"x", x}});
      ASSERT_TRUE(want.ok()) << want.status();
      for (auto layout : {ActivationLayout::kPrimitive, ActivationLayout::kBlocked}) {
        SCOPED_TRACE(::testing::Message() << "add_reads_x " << add_reads_x << " c " << c << " "
                                          << ActivationLayoutName(layout));
        CpuEngineOptions eo;
        eo.layout = layout;
        eo.threads = 2;
        auto engine = BuildCpuEngine(*compiled, eo);
        ASSERT_TRUE(engine.ok()) << engine.status();
        EXPECT_EQ((*engine)->info().fallback_ops, 0);
        std::vector<Tensor> out;
        ASSERT_TRUE((*engine)->Run({x}, out).ok());
        const check::Divergence d =
            check::CompareTensors(out[0], want->at((*engine)->outputs()[0].name), {1e-4, 1e-5});
        EXPECT_TRUE(d.ok) << d.message;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::cpu::ew
