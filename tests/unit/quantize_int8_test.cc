// quantize_int8: a float graph quantized with a calibration, then lowered by fuse_qdq, has
// integer products where the QDQ form allows them, stays within the quantization's error of
// the float graph (and is not the float graph: the numbers moved), and leaves alone what it
// cannot quantize. Also the calibration (runtime/check/calibrate.h) and the pipeline's
// precision "int8".
#include "compiler/passes/quantize_int8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "compiler/passes/fuse_qdq.h"
#include "compiler/pipeline.h"
#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ir/verifier.h"
#include "ops/interpreter.h"
#include "runtime/check/calibrate.h"
#include "tests/unit/pass_test_util.h"

namespace kiln::passes {
namespace {

using ::kiln::testing::CountOps;

Tensor Random(std::vector<int64_t> shape, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
  return t;
}

// x -> Conv(3x3) -> Relu -> MaxPool -> Conv(1x1) -> + the pooled map -> Conv(1x1) head -> out.
std::unique_ptr<Graph> ConvNet() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3, 8, 8});
  Value* c1 =
      b.Op("Conv", {x, b.Constant("w1", Random({8, 3, 3, 3}, 1)), b.Constant("b1", Random({8}, 2))},
           {{"pads", Attribute::Ints({1, 1, 1, 1})}});
  Value* r1 = b.Op("Relu", {c1});
  Value* p =
      b.Op("MaxPool", {r1},
           {{"kernel_shape", Attribute::Ints({2, 2})}, {"strides", Attribute::Ints({2, 2})}});
  Value* c2 = b.Op("Conv", {p, b.Constant("w2", Random({8, 8, 1, 1}, 3))});
  Value* sum = b.Op("Add", {c2, p});
  b.Output(b.Op("Conv", {sum, b.Constant("w3", Random({4, 8, 1, 1}, 4))}));
  return b.Build();
}

// Relative L2 distance of `got` from `want` over every output.
double RelativeError(const ref::TensorMap& want, const ref::TensorMap& got) {
  double diff = 0, norm = 0;
  for (const auto& [name, w] : want) {
    const Tensor& g = got.at(name);
    for (int64_t i = 0; i < w.numel(); ++i) {
      diff += std::pow(g.GetDouble(i) - w.GetDouble(i), 2);
      norm += std::pow(w.GetDouble(i), 2);
    }
  }
  return std::sqrt(diff / norm);
}

// Calibrates `g` on `calibrate`, quantizes and lowers it; returns the error on `feed` (a
// different input than the calibration's when given).
double QuantizeAndCompare(Graph& g, const ref::TensorMap& calibrate, const ref::TensorMap& feed) {
  EXPECT_TRUE(shape::InferShapes(g).ok());
  absl::StatusOr<std::shared_ptr<const Calibration>> ranges = check::Calibrate(g, {&calibrate});
  EXPECT_TRUE(ranges.ok()) << ranges.status();
  std::unique_ptr<Graph> before = g.Clone();
  absl::StatusOr<bool> changed = QuantizeInt8(g, **ranges);
  EXPECT_TRUE(changed.ok() && *changed) << changed.status();
  EXPECT_TRUE(FuseQdq(g).ok());
  EXPECT_TRUE(VerifyGraph(g).ok()) << VerifyGraph(g);
  EXPECT_TRUE(shape::InferShapes(g).ok());
  absl::StatusOr<ref::TensorMap> want = ref::Run(*before, feed);
  absl::StatusOr<ref::TensorMap> got = ref::Run(g, feed);
  EXPECT_TRUE(want.ok() && got.ok());
  for (const auto& [name, t] : *got) EXPECT_EQ(t.dtype(), DType::kFloat32) << name;
  return RelativeError(*want, *got);
}

TEST(QuantizeInt8, ConvolutionsBecomeIntegerAndStayNearTheFloatGraph) {
  std::unique_ptr<Graph> g = ConvNet();
  const ref::TensorMap feed = {{"x", Random({2, 3, 8, 8}, 9)}};
  const double err = QuantizeAndCompare(*g, feed, feed);
  EXPECT_EQ(CountOps(*g, "QLinearConv"), 2);
  // The head (its result is the output's, through no other product) stays float.
  EXPECT_EQ(CountOps(*g, "Conv"), 1);
  EXPECT_EQ(testing::FindOp(*g, "Conv")->input(1)->name, "w3");
  // The pool runs on the bytes between the two integer convolutions.
  const Node* pool = testing::FindOp(*g, "MaxPool");
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->input(0)->dtype, DType::kUInt8);
  // uint8 activations and int8 weights: about a percent, and not exact.
  EXPECT_LT(err, 0.03);
  EXPECT_GT(err, 1e-5);
}

TEST(QuantizeInt8, LinearLayersBecomeQLinearMatMul) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 4, 16});
  Value* h = b.Op("MatMul", {x, b.Constant("w", Random({16, 8}, 4))});
  Value* y = b.Op("Add", {h, b.Constant("bias", Random({8}, 5))});
  Value* k = b.Input("k", DType::kFloat32, {2, 8, 4});
  b.Output(b.Op("MatMul", {y, k}));  // two activations: stays float
  std::unique_ptr<Graph> g = b.Build();
  const ref::TensorMap calibrate = {{"x", Random({2, 4, 16}, 6)}, {"k", Random({2, 8, 4}, 7)}};
  const ref::TensorMap other = {{"x", Random({2, 4, 16}, 8, -0.9f, 0.9f)},
                                {"k", Random({2, 8, 4}, 10)}};
  const double err = QuantizeAndCompare(*g, calibrate, other);
  EXPECT_EQ(CountOps(*g, "QLinearMatMul"), 1);
  EXPECT_EQ(CountOps(*g, "MatMul"), 1);
  EXPECT_LT(err, 0.03);
  EXPECT_GT(err, 1e-5);
}

// A classifier's Gemm (transB, bias) becomes MatMul -> Q -> DQ -> Add: an integer product even
// though its result is the graph's output; a scaled Gemm stays.
TEST(QuantizeInt8, AGemmWithConstantWeightsBecomesAQuantizedLinearLayer) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {3, 16});
  Value* h = b.Op(
      "Relu",
      {b.Op("Gemm", {x, b.Constant("w", Random({8, 16}, 21)), b.Constant("c", Random({8}, 22))},
            {{"transB", Attribute::Int(1)}})});
  b.Output(b.Op("Gemm", {h, b.Constant("head", Random({8, 4}, 25))}));  // the head stays
  std::unique_ptr<Graph> g = b.Build();
  const ref::TensorMap calibrate = {{"x", Random({3, 16}, 23)}};
  const ref::TensorMap other = {{"x", Random({3, 16}, 24, -0.8f, 0.8f)}};
  const double err = QuantizeAndCompare(*g, calibrate, other);
  EXPECT_EQ(CountOps(*g, "QLinearMatMul"), 1);
  EXPECT_EQ(CountOps(*g, "Gemm"), 1);
  EXPECT_EQ(CountOps(*g, "Add"), 1);
  EXPECT_LT(err, 0.03);
  EXPECT_GT(err, 1e-5);

  GraphBuilder s;
  Value* xs = s.Input("x", DType::kFloat32, {3, 16});
  Value* hs =
      s.Op("Gemm", {xs, s.Constant("w", Random({16, 8}, 21)), s.Constant("c", Random({8}, 22))},
           {{"alpha", Attribute::Float(0.5f)}});
  s.Output(s.Op("Gemm", {hs, s.Constant("head", Random({8, 4}, 25))}));
  std::unique_ptr<Graph> scaled = s.Build();
  ASSERT_TRUE(shape::InferShapes(*scaled).ok());
  absl::StatusOr<std::shared_ptr<const Calibration>> ranges =
      check::Calibrate(*scaled, {&calibrate});
  ASSERT_TRUE(ranges.ok());
  absl::StatusOr<bool> changed = QuantizeInt8(*scaled, **ranges);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(CountOps(*scaled, "Gemm"), 2);
}

TEST(QuantizeInt8, WeightsArePerChannelSymmetricAndAZeroChannelKeepsAScale) {
  Tensor w = Random({4, 2, 1, 1}, 11);
  for (int64_t i = 2; i < 4; ++i) w.mutable_data<float>()[i] = 0;     // channel 1: zeros
  for (int64_t i = 4; i < 6; ++i) w.mutable_data<float>()[i] *= 100;  // channel 2: large
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 2, 3, 3});
  b.Output(b.Op("Relu", {b.Op("Conv", {x, b.Constant("w", w)})}));
  std::unique_ptr<Graph> g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  // The Relu's result is a graph output (outputs stay float): nothing changes.
  Calibration ranges;
  for (const auto& v : g->values()) ranges[v->name] = {-1, 1};
  absl::StatusOr<bool> changed = QuantizeInt8(*g, ranges);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);

  // Read by another Conv instead (the head, which stays float), the Conv's Relu output is
  // quantized and its weights with it.
  GraphBuilder b2;
  Value* x2 = b2.Input("x", DType::kFloat32, {1, 2, 3, 3});
  Value* r2 = b2.Op("Relu", {b2.Op("Conv", {x2, b2.Constant("w", w)})});
  b2.Output(b2.Op("Conv", {r2, b2.Constant("head", Random({2, 4, 1, 1}, 15))}));
  std::unique_ptr<Graph> g2 = b2.Build();
  ASSERT_TRUE(shape::InferShapes(*g2).ok());
  Calibration ranges2;
  for (const auto& v : g2->values()) ranges2[v->name] = {-2, 2};
  ASSERT_TRUE(QuantizeInt8(*g2, ranges2).ok());
  const Value* wq = g2->FindValue("w_quantized");
  const Value* ws = g2->FindValue("w_scale");
  ASSERT_TRUE(wq && ws && wq->constant && ws->constant);
  ASSERT_EQ(ws->constant->numel(), 4);
  for (int64_t c = 0; c < 4; ++c) {
    float max_abs = 0;
    for (int64_t i = 0; i < 2; ++i)
      max_abs = std::max(max_abs, std::fabs(w.data<float>()[c * 2 + i]));
    const float s = ws->constant->data<float>()[c];
    EXPECT_FLOAT_EQ(s, max_abs > 0 ? max_abs / 127 : 1.0f) << c;
    for (int64_t i = 0; i < 2; ++i) {
      const int q = wq->constant->data<int8_t>()[c * 2 + i];
      EXPECT_LE(std::abs(q), 127);
      EXPECT_NEAR(q * s, w.data<float>()[c * 2 + i], s / 2 + 1e-6) << c;
    }
  }
}

TEST(QuantizeInt8, BucketsShareTheQuantizedWeightsThroughTheFoldCache) {
  const ref::TensorMap feed = {{"x", Random({2, 3, 8, 8}, 9)}};
  std::unique_ptr<Graph> a = ConvNet();
  ASSERT_TRUE(shape::InferShapes(*a).ok());
  std::unique_ptr<Graph> b = a->Clone();  // a second bucket: the same weight buffers
  absl::StatusOr<std::shared_ptr<const Calibration>> ranges = check::Calibrate(*a, {&feed});
  ASSERT_TRUE(ranges.ok());
  FoldCache cache;
  ASSERT_TRUE(QuantizeInt8(*a, **ranges, &cache).ok());
  ASSERT_TRUE(QuantizeInt8(*b, **ranges, &cache).ok());
  const Value* qa = a->FindValue("w1_quantized");
  const Value* qb = b->FindValue("w1_quantized");
  ASSERT_TRUE(qa && qb && qa->constant && qb->constant);
  EXPECT_TRUE(qa->constant->SharesBufferWith(*qb->constant));
  EXPECT_GT(cache.hits(), 0u);
  // Without the cache each compile quantizes its own copy.
  std::unique_ptr<Graph> c = ConvNet();
  ASSERT_TRUE(shape::InferShapes(*c).ok());
  ASSERT_TRUE(QuantizeInt8(*c, **ranges).ok());
  EXPECT_FALSE(c->FindValue("w1_quantized")->constant->SharesBufferWith(*qa->constant));
}

TEST(QuantizeInt8, LeavesWhatItCannotQuantize) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 2, 4, 4});
  Value* wd = b.Input("wd", DType::kFloat32, {2, 2, 1, 1});
  Value* runtime_w = b.Op("Conv", {x, wd});  // weights not constant
  Value* unseen = b.Op("Conv", {runtime_w, b.Constant("w1", Random({2, 2, 1, 1}, 12))});
  Value* inf = b.Op("Conv", {unseen, b.Constant("w2", Random({2, 2, 1, 1}, 13))});
  // Each of the three above is read by the next product, so none is a head: what leaves them
  // float is their weights, their input's missing range and their result's infinite one.
  b.Output(b.Op("Conv", {inf, b.Constant("w3", Random({2, 2, 1, 1}, 14))}));
  std::unique_ptr<Graph> g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  Calibration ranges;
  for (const auto& v : g->values()) ranges[v->name] = {-1, 1};
  ranges.erase(runtime_w->name);  // `unseen` reads a value the calibration never saw
  ranges[inf->name] = {-1, std::numeric_limits<float>::infinity()};  // `inf` has no finite range
  absl::StatusOr<bool> changed = QuantizeInt8(*g, ranges);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(CountOps(*g, "QuantizeLinear"), 0);
  // Without a calibration the pass refuses.
  QuantizeInt8Pass pass(nullptr);
  EXPECT_TRUE(absl::IsFailedPrecondition(pass.Run(*g).status()));
}

TEST(QuantizeInt8, CalibrationTakesEachValuesRangeAndMarksNonFiniteOnes) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4});
  Value* y = b.Op("Relu", {x});
  Value* z = b.Op("Log", {y});  // log(0) = -inf
  b.Output(z);
  std::unique_ptr<Graph> g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  const ref::TensorMap a = {{"x", Tensor::FromFloat({-3, 0.5f, 2, 1}, {4})}};
  const ref::TensorMap c = {{"x", Tensor::FromFloat({1, 4, 2, 1}, {4})}};
  absl::StatusOr<std::shared_ptr<const Calibration>> r = check::Calibrate(*g, {&a, &c});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ((*r)->at("x").lo, -3);
  EXPECT_FLOAT_EQ((*r)->at("x").hi, 4);
  EXPECT_FLOAT_EQ((*r)->at(y->name).lo, 0);
  EXPECT_FLOAT_EQ((*r)->at(y->name).hi, 4);
  EXPECT_TRUE(std::isinf((*r)->at(z->name).lo));
  // The mean square over both feeds; none for a value with no finite range.
  EXPECT_DOUBLE_EQ((*r)->at("x").mean_sq, (9 + 0.25 + 4 + 1 + 1 + 16 + 4 + 1) / 8.0);
  EXPECT_EQ((*r)->at(z->name).mean_sq, 0.0);
  EXPECT_FALSE(check::Calibrate(*g, {}).ok());
}

TEST(QuantizeInt8, RunsInThePipelineOnlyAtInt8WithACalibration) {
  const ref::TensorMap feed = {{"x", Random({2, 3, 8, 8}, 9)}};
  std::unique_ptr<Graph> probe = ConvNet();
  ASSERT_TRUE(shape::InferShapes(*probe).ok());
  absl::StatusOr<std::shared_ptr<const Calibration>> ranges = check::Calibrate(*probe, {&feed});
  ASSERT_TRUE(ranges.ok());
  // int8-mixed with a share that small keeps every product float.
  for (const std::string precision : {"float32", "int8", "int8-mixed"}) {
    std::unique_ptr<Graph> g = ConvNet();
    ASSERT_TRUE(shape::InferShapes(*g).ok());
    PipelineOptions o;
    o.precision = precision;
    o.calibration = *ranges;
    o.int8_noise_kept = 1e-12;  // read by int8-mixed only
    ASSERT_TRUE(RunPipeline(*g, o).ok()) << precision;
    EXPECT_EQ(CountOps(*g, "QLinearConv"), precision == "int8" ? 2 : 0) << precision;
  }
  std::unique_ptr<Graph> g = ConvNet();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  PipelineOptions none;
  none.precision = "int8";
  EXPECT_TRUE(absl::IsFailedPrecondition(RunPipeline(*g, none).status()));
}

}  // namespace
}  // namespace kiln::passes
