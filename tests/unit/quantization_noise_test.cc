// quantization_noise: the outputs' sensitivity to a noise added to a value follows the graph's
// gains (a layer scale silences a branch, an Add passes its inputs' noise on, an average keeps
// 1/k of it), and int8-mixed keeps in float the products whose rounding the outputs feel, not
// the ones whose rounding is locally largest.
#include "compiler/passes/quantization_noise.h"

#include <gtest/gtest.h>

#include "compiler/passes/fuse_qdq.h"
#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "runtime/check/calibrate.h"
#include "tests/unit/pass_test_util.h"
#include "tests/unit/test_tensors.h"

namespace kiln::passes {
namespace {

using ::kiln::testing::CountOps;

Tensor Random(std::vector<int64_t> shape, uint64_t seed) {
  return testing::SeededUniform(std::move(shape), seed);
}

struct Branches {
  std::unique_ptr<Graph> graph;
  Value *quiet = nullptr, *loud = nullptr;  // the two branches' product results
};

// x -> Conv a -> Relu -> { Conv quiet -> Mul 1e-4 (a layer scale), Conv loud } -> Add ->
// Conv head -> out. `quiet` has an outlier channel (its own rounding is locally the larger),
// but its branch reaches the output scaled by 1e-4.
Branches TwoBranches() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 4, 6, 6});
  Value* a = b.Op("Relu", {b.Op("Conv", {x, b.Constant("wa", Random({8, 4, 1, 1}, 1))})});
  Tensor wq = Random({8, 8, 1, 1}, 2);
  for (int64_t i = 0; i < 8; ++i) wq.mutable_data<float>()[i] *= 50;  // channel 0: an outlier
  Value* quiet = b.Op("Conv", {a, b.Constant("wq", wq)});
  Value* loud = b.Op("Conv", {a, b.Constant("wl", Random({8, 8, 1, 1}, 3))});
  Value* scaled =
      b.Op("Mul", {quiet, b.Constant("layer_scale", Tensor::Scalar(DType::kFloat32, 1e-4f))});
  Value* sum = b.Op("Add", {scaled, loud});
  b.Output(b.Op("Conv", {sum, b.Constant("head", Random({2, 8, 1, 1}, 4))}));
  Branches out{b.Build(), quiet, loud};
  EXPECT_TRUE(shape::InferShapes(*out.graph).ok());
  return out;
}

std::shared_ptr<const Calibration> CalibrateOn(const Graph& g, uint32_t seed) {
  const ref::TensorMap feed = {{"x", Random({1, 4, 6, 6}, seed)}};
  absl::StatusOr<std::shared_ptr<const Calibration>> r = check::Calibrate(g, {&feed});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : nullptr;
}

TEST(QuantizationNoise, SensitivityFollowsTheGraphsGains) {
  Branches m = TwoBranches();
  std::shared_ptr<const Calibration> ranges = CalibrateOn(*m.graph, 5);
  ASSERT_NE(ranges, nullptr);
  EXPECT_GT(ranges->at(m.loud->name).mean_sq, 0.0);
  const auto s = NoiseSensitivity(*m.graph, *ranges);
  ASSERT_TRUE(s.count(m.quiet) && s.count(m.loud));
  // Through the Mul, noise power scales by the layer scale's square (1e-8); the Add passes
  // the loud branch's on unchanged.
  EXPECT_NEAR(s.at(m.quiet) / s.at(m.loud), 1e-8, 1e-10);
  const Value* out = m.graph->outputs[0];
  EXPECT_DOUBLE_EQ(s.at(out), 1 / ranges->at(out->name).mean_sq);
  // A constant's mean square is computed; an unseen value has none.
  EXPECT_NEAR(MeanSquareOf(*ranges, m.graph->FindValue("layer_scale")), 1e-8, 1e-12);
  Calibration empty;
  EXPECT_EQ(MeanSquareOf(empty, m.loud), 0.0);
}

TEST(QuantizationNoise, AnAverageKeepsAFractionOfTheNoise) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 2, 4, 4});
  Value* pooled = b.Op("GlobalAveragePool", {x});
  Value* halves = b.Op("Concat", {pooled, pooled}, {{"axis", Attribute::Int(1)}});
  b.Output(halves);
  std::unique_ptr<Graph> g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  Calibration ranges;
  for (const auto& v : g->values()) ranges[v->name] = {-1, 1, 0.25};
  const auto s = NoiseSensitivity(*g, ranges);
  // 1 / ms at the output; the Concat's two halves each fill half of it (read twice: summed);
  // the pool keeps 1/16 of a 4x4 map's independent noise.
  EXPECT_DOUBLE_EQ(s.at(halves), 4.0);
  EXPECT_DOUBLE_EQ(s.at(pooled), 4.0);
  EXPECT_DOUBLE_EQ(s.at(x), 4.0 / 16);
}

TEST(QuantizationNoise, Int8MixedKeepsTheProductsTheOutputsFeelInFloat) {
  Branches m = TwoBranches();
  std::shared_ptr<const Calibration> ranges = CalibrateOn(*m.graph, 5);
  ASSERT_NE(ranges, nullptr);
  // Every candidate quantized at noise_kept 1 (the head stays float).
  std::unique_ptr<Graph> all = m.graph->Clone();
  ASSERT_TRUE(QuantizeInt8(*all, *ranges).ok());
  ASSERT_TRUE(FuseQdq(*all).ok());
  EXPECT_EQ(CountOps(*all, "QLinearConv"), 3);
  // Half the noise: the loud branch goes float first; the quiet one, whose own rounding is the
  // larger, stays quantized, since the layer scale hides it.
  std::unique_ptr<Graph> mixed = m.graph->Clone();
  ASSERT_TRUE(QuantizeInt8(*mixed, *ranges, nullptr, 0.5).ok());
  ASSERT_TRUE(FuseQdq(*mixed).ok());
  bool loud_float = false, quiet_int8 = false;
  for (const auto& n : mixed->nodes()) {
    if (n->op_type == "Conv" && n->input(1)->name == "wl") loud_float = true;
    if (n->op_type == "QLinearConv" && n->input(3)->name.rfind("wq", 0) == 0) quiet_int8 = true;
  }
  EXPECT_TRUE(loud_float);
  EXPECT_TRUE(quiet_int8);
  EXPECT_LT(CountOps(*mixed, "QLinearConv"), 3);
  // A share that small keeps every product float.
  std::unique_ptr<Graph> none = m.graph->Clone();
  ASSERT_TRUE(QuantizeInt8(*none, *ranges, nullptr, 1e-12).ok());
  EXPECT_EQ(CountOps(*none, "QuantizeLinear"), 0);
}

}  // namespace
}  // namespace kiln::passes
