// The CPU engine's bfloat16 products (kiln_precision = "bf16"): on a CPU with native bf16
// products they run in bf16 (EngineInfo::bf16_ops) and stay within bf16's rounding of the
// float32 reference; elsewhere (and in the .avx2 twin) the mark is ignored and the engine is
// float32-exact.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler/compile.h"
#include "ir/builder.h"
#include "ops/interpreter.h"
#include "runtime/check/differential.h"
#include "runtime/cpu/cpu_engine.h"
#include "runtime/cpu/isa.h"
#include "tests/unit/test_tensors.h"

namespace kiln {
namespace {

Tensor Wave(std::vector<int64_t> shape, double seed) {
  return testing::SeededUniform(std::move(shape), static_cast<uint64_t>(seed * 1e6));
}

TEST(CpuBf16, WeightProductsRunInBf16WhereTheCpuHasIt) {
  // x [4, 16, 64] -> MatMul + bias + Gelu -> Gemm-shaped residual product -> output.
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4, 16, 64});
  Value* h = b.Op("Gelu", {b.Op("Add", {b.Op("MatMul", {x, b.Constant("w1", Wave({64, 96}, 0.37))}),
                                        b.Constant("b1", Wave({96}, 0.5))})});
  b.Output(b.Op("Add", {b.Op("MatMul", {h, b.Constant("w2", Wave({96, 64}, 0.23))}), x}));
  std::unique_ptr<Graph> g = b.Build();
  CompileOptions co;
  co.pipeline.precision = "bf16";
  absl::StatusOr<CompiledGraph> c = CompileGraph(*g, co);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::unique_ptr<runtime::Engine>> e = cpu::BuildCpuEngine(*c, {});
  ASSERT_TRUE(e.ok()) << e.status();
  const bool native = cpu::HasBf16DotProduct();
  EXPECT_EQ((*e)->info().bf16_ops, native ? 2 : 0) << (*e)->info().isa;
  absl::StatusOr<ref::TensorMap> feeds = check::RandomInputs(*g, {});
  ASSERT_TRUE(feeds.ok());
  absl::StatusOr<ref::TensorMap> want = ref::Run(*g, *feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  std::vector<Tensor> outs;
  ASSERT_TRUE((*e)->Run({feeds->at("x")}, outs).ok());
  const Tensor& w = want->begin()->second;
  ASSERT_EQ(outs[0].shape(), w.shape());
  double max_err = 0, sum_sq = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    max_err = std::max(max_err, std::abs(outs[0].GetDouble(i) - w.GetDouble(i)));
    sum_sq += w.GetDouble(i) * w.GetDouble(i);
  }
  const double rms = std::sqrt(sum_sq / static_cast<double>(w.numel()));
  if (native) {
    // bf16 keeps 8 significant bits: products of 64-96 terms land within a few percent of
    // the output's scale, and do move (a float32 engine would be within 1e-5).
    EXPECT_LT(max_err, 0.05 * rms);
    EXPECT_GT(max_err, 1e-5 * rms);
  } else {
    EXPECT_LT(max_err, 1e-4 * rms + 1e-5);
  }
}

TEST(CpuBf16, ConvolutionsRunInBf16InBothLayouts) {
  // Conv + bias + Relu, then a Conv with a residual Add: the FusedConv post-op paths.
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 16, 12, 12});
  Value* h = b.Op("Relu", {b.Op("Conv", {x, b.Constant("w1", Wave({32, 16, 3, 3}, 0.11)),
                                        b.Constant("b1", Wave({32}, 0.12))},
                                {{"pads", Attribute::Ints({1, 1, 1, 1})}})});
  b.Output(b.Op("Add", {b.Op("Conv", {h, b.Constant("w2", Wave({16, 32, 1, 1}, 0.13))}), x}));
  std::unique_ptr<Graph> g = b.Build();
  CompileOptions co;
  co.pipeline.precision = "bf16";
  absl::StatusOr<CompiledGraph> c = CompileGraph(*g, co);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<ref::TensorMap> feeds = check::RandomInputs(*g, {});
  ASSERT_TRUE(feeds.ok());
  absl::StatusOr<ref::TensorMap> want = ref::Run(*g, *feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  const bool native = cpu::HasBf16DotProduct();
  for (cpu::ActivationLayout layout : {cpu::ActivationLayout::kPrimitive, cpu::ActivationLayout::kBlocked}) {
    SCOPED_TRACE(cpu::ActivationLayoutName(layout));
    cpu::CpuEngineOptions eo;
    eo.layout = layout;
    absl::StatusOr<std::unique_ptr<runtime::Engine>> e = cpu::BuildCpuEngine(*c, eo);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ((*e)->info().bf16_ops, native ? 2 : 0);
    std::vector<Tensor> outs;
    ASSERT_TRUE((*e)->Run({feeds->at("x")}, outs).ok());
    const Tensor& w = want->begin()->second;
    double max_err = 0, sum_sq = 0;
    for (int64_t i = 0; i < w.numel(); ++i) {
      max_err = std::max(max_err, std::abs(outs[0].GetDouble(i) - w.GetDouble(i)));
      sum_sq += w.GetDouble(i) * w.GetDouble(i);
    }
    const double rms = std::sqrt(sum_sq / static_cast<double>(w.numel()));
    EXPECT_LT(max_err, (native ? 0.05 : 1e-4) * rms);
    // A NaN in x: the guard's bound sees it in x (not in the bf16 copy) and the exact path
    // keeps it where the reference does (oneDNN's ReLU post-op would drop it).
    ref::TensorMap nan_feed = *feeds;
    nan_feed.at("x").mutable_data<float>()[5 * 12 + 5] = std::nanf("");
    absl::StatusOr<ref::TensorMap> nan_want = ref::Run(*g, nan_feed);
    ASSERT_TRUE(nan_want.ok());
    std::vector<Tensor> nan_outs;
    ASSERT_TRUE((*e)->Run({nan_feed.at("x")}, nan_outs).ok());
    const Tensor& nw = nan_want->begin()->second;
    int nans = 0;
    for (int64_t i = 0; i < nw.numel(); ++i) {
      nans += std::isnan(nw.GetDouble(i));
      EXPECT_EQ(std::isnan(nan_outs[0].GetDouble(i)), std::isnan(nw.GetDouble(i))) << i;
    }
    EXPECT_GT(nans, 0);
    if (native) {
      EXPECT_GT(max_err, 1e-5 * rms);
    }
  }
}

}  // namespace
}  // namespace kiln
