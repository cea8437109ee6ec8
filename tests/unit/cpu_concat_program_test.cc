// Programs over a concatenation on the CPU engine (elementwise_concat.cc): after
// fuse_concat_elementwise, DenseNet's Concat -> BatchNorm -> ReLU runs piece by piece into
// the output's channel slices, in channel blocks, channels-last (joined first) and plain
// layouts, at batch 1 and 3, equal to the reference on the raw graph, and with no fallback.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "compiler/compile.h"
#include "ir/builder.h"
#include "ir/kiln_ops.h"
#include "ops/interpreter.h"
#include "runtime/check/compare.h"
#include "runtime/cpu/cpu_engine.h"
#include "tests/unit/test_tensors.h"

namespace kiln {
namespace {

Tensor Random(const std::vector<int64_t>& shape, int seed) {
  return testing::SeededUniform(shape, static_cast<uint64_t>(seed));
}

// x [n, 16, hw, hw]; Concat(conv3x3(x) -> `grown` channels, conv1x1(x) -> 16, x) -> scale
// (per channel, or per image and channel) -> shift -> Relu -> conv1x1 -> 16 channels.
std::unique_ptr<Graph> DenseLayer(int64_t n, int64_t grown, bool per_image, int64_t hw = 6) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {n, 16, hw, hw});
  Value* a = b.Op("Conv", {x, b.Constant("wa", Random({grown, 16, 3, 3}, 1))},
                  {{"pads", Attribute::Ints({1, 1, 1, 1})}});
  Value* c = b.Op("Conv", {x, b.Constant("wc", Random({16, 16, 1, 1}, 2))});
  Value* cat = b.Op("Concat", {a, c, x}, {{"axis", Attribute::Int(1)}});
  const int64_t ch = grown + 32;
  Value* m = b.Op("Mul", {cat, b.Constant("scale", Random({per_image ? n : 1, ch, 1, 1}, 3))});
  Value* r = b.Op("Relu", {b.Op("Add", {m, b.Constant("shift", Random({ch, 1, 1}, 4))})});
  b.Output(b.Op("Conv", {r, b.Constant("wo", Random({16, ch, 1, 1}, 5))}));
  return b.Build();
}

TEST(CpuConcatProgram, PiecesWriteTheirSlicesInEveryLayout) {
  for (int64_t n : {1, 3}) {
    for (int64_t grown : {32, 24}) {  // 24: not whole 16-channel blocks, read plain
      auto g = DenseLayer(n, grown, /*per_image=*/n == 3);
      CompileOptions co;
      co.pipeline.level = OptLevel::kO2;
      auto compiled = CompileGraph(*g, co);
      ASSERT_TRUE(compiled.ok()) << compiled.status();
      int fused = 0, concats = 0;
      for (const auto& node : compiled->graph->nodes()) {
        fused += kiln_ops::ConcatInputs(*node) == 3;
        concats += node->op_type == "Concat";
      }
      EXPECT_EQ(fused, 1);
      EXPECT_EQ(concats, 0);
      Tensor x = Random({n, 16, 6, 6}, 6);
      x.mutable_data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
      auto want = ref::Run(*g, {{"x", x}});
      ASSERT_TRUE(want.ok()) << want.status();
      for (auto layout : {cpu::ActivationLayout::kPrimitive, cpu::ActivationLayout::kBlocked}) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " grown " << grown << " "
                                          << cpu::ActivationLayoutName(layout));
        cpu::CpuEngineOptions eo;
        eo.layout = layout;
        auto engine = cpu::BuildCpuEngine(*compiled, eo);
        ASSERT_TRUE(engine.ok()) << engine.status();
        EXPECT_EQ((*engine)->info().fallback_ops, 0);
        for (int run = 0; run < 2; ++run) {  // the second run over the first's buffers
          std::vector<Tensor> out;
          ASSERT_TRUE((*engine)->Run({x}, out).ok());
          const check::Divergence d =
              check::CompareTensors(out[0], want->at((*engine)->outputs()[0].name), {1e-3, 1e-4});
          EXPECT_TRUE(d.ok) << d.message;
        }
      }
    }
  }
}

// Pieces large enough together for the team (n 8 at 24 x 24: 295K elements written), each
// taking its share of every piece in one parallel region: the same answer as the reference,
// on one thread and on two.
TEST(CpuConcatProgram, PiecesSharedAcrossTheTeamMatchTheReference) {
  auto g = DenseLayer(8, 32, /*per_image=*/false, /*hw=*/24);
  CompileOptions co;
  co.pipeline.level = OptLevel::kO2;
  auto compiled = CompileGraph(*g, co);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  Tensor x = Random({8, 16, 24, 24}, 7);
  auto want = ref::Run(*g, {{"x", x}});
  ASSERT_TRUE(want.ok()) << want.status();
  for (int threads : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << "threads " << threads);
    cpu::CpuEngineOptions eo;
    eo.layout = cpu::ActivationLayout::kBlocked;
    eo.threads = threads;
    auto engine = cpu::BuildCpuEngine(*compiled, eo);
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<Tensor> out;
    ASSERT_TRUE((*engine)->Run({x}, out).ok());
    const check::Divergence d =
        check::CompareTensors(out[0], want->at((*engine)->outputs()[0].name), {1e-3, 1e-4});
    EXPECT_TRUE(d.ok) << d.message;
  }
}

}  // namespace
}  // namespace kiln
