// Int8 inference: the fuse_qdq pass (DQ -> Conv [-> Relu] -> Q becomes QLinearConv) on the
// reference interpreter before and after, and the CPU engine's QLinearConv (oneDNN int8
// convolution) against the reference QLinearConv, bit for bit. Each refusal of the pass has
// a negative case: the float Conv stays and the graph computes what it did.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "compiler/compile.h"
#include "compiler/passes/fuse_qdq.h"
#include "ir/builder.h"
#include "ops/interpreter.h"
#include "runtime/check/differential.h"
#include "runtime/cpu/cpu_engine.h"
#include "tests/unit/pass_test_util.h"
#include "tests/unit/qdq_util.h"

namespace kiln {
namespace {

using namespace qdq_test;  // NOLINT: the helpers shared with the other half

using testing::CountOps;

class FuseQdqConv : public ::testing::TestWithParam<ConvCase> {};

TEST_P(FuseQdqConv, BecomesQLinearConvWithinOneQuantum) {
  QdqGraph q = BuildQdqConv(GetParam());
  ExpectFusedWithinOneQuantum(q);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, FuseQdqConv,
    ::testing::Values(ConvCase{"u8_per_channel_bias"},
                      ConvCase{"u8_per_tensor_no_bias", DType::kUInt8, DType::kUInt8, 0, 128,
                               false, false},
                      ConvCase{"s8_activations", DType::kInt8, DType::kInt8, -5, 2},
                      ConvCase{"relu_folds_at_zero_point_0", DType::kUInt8, DType::kUInt8, 7, 0,
                               true, true, true},
                      ConvCase{"relu_folds_s8_at_minus_128", DType::kInt8, DType::kInt8, 0,
                               -128, true, true, true},
                      ConvCase{"depthwise_strided", DType::kUInt8, DType::kUInt8, 7, 3, true,
                               true, false, 8, 8, 8, 2}),
    [](const auto& info) { return info.param.name; });

// Refusals: the float Conv stays and nothing changes.
void ExpectUntouched(QdqGraph& q) {
  ASSERT_TRUE(shape::InferShapes(*q.graph).ok());
  absl::StatusOr<bool> changed = passes::FuseQdq(*q.graph);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(CountOps(*q.graph, "QLinearConv"), 0);
  EXPECT_EQ(CountOps(*q.graph, "Conv"), 1);
}

TEST(FuseQdqConvRefuses, ReluBeforeQWithZeroPointAboveTheLowestValue) {
  ConvCase c{"relu_zp3"};
  c.relu = true;  // Q(relu(v)) = max(Q(v), 3): not Q(v)
  QdqGraph q = BuildQdqConv(c);
  ExpectUntouched(q);
}

// Q(clip(v, 0, 12)) with sy 0.04: Q(12) = 300 saturates to 255, so the Clip is implied.
TEST(FuseQdqConv, ClipWhoseBoundsQSaturatesFolds) {
  ConvCase c{"clip12"};
  c.y_zero = 0;
  c.clip_hi = 12.f;
  QdqGraph q = BuildQdqConv(c);
  ExpectFusedWithinOneQuantum(q);
}

TEST(FuseQdqConvRefuses, ClipInsideTheQuantizedRange) {
  ConvCase c{"clip6"};
  c.y_zero = 0;
  c.clip_hi = 6.f;  // Q(6) = 150: the Clip cuts values Q would keep
  QdqGraph q = BuildQdqConv(c);
  ExpectUntouched(q);
}

TEST(FuseQdqConvRefuses, WeightZeroPointOtherThanZero) {
  QdqGraph q = BuildQdqConv(ConvCase{"wzp"}, false, 1);
  ExpectUntouched(q);
}

TEST(FuseQdqConvRefuses, ConvResultWithAnotherReader) {
  QdqGraph q = BuildQdqConv(ConvCase{"reader"}, true);
  ExpectUntouched(q);
}

// DQ -> MaxPool -> Q with one scale and zero point: MaxPool on the quantized values.
std::unique_ptr<Graph> QdqMaxPool(DType type, float q_scale) {
  GraphBuilder b;
  Value* xq = b.Input("xq", type, {2, 16, 9, 9});
  Value* x = b.Op("DequantizeLinear", {xq, b.Constant("s", Floats({0.05f})),
                                       b.Constant("z", ByteScalar(type, 3))});
  Value* p = b.Op("MaxPool", {x}, {{"kernel_shape", Attribute::Ints({3, 3})},
                                   {"strides", Attribute::Ints({2, 2})},
                                   {"pads", Attribute::Ints({1, 1, 1, 1})}});
  b.Output(b.Op("QuantizeLinear", {p, b.Constant("sq", Floats({q_scale})),
                                   b.Constant("zq", ByteScalar(type, 3))}));
  return b.Build();
}

TEST(FuseQdqMaxPool, RunsOnTheQuantizedValuesExactlyOnTheCpuEngine) {
  for (DType type : {DType::kUInt8, DType::kInt8}) {
    auto g = QdqMaxPool(type, 0.05f);
    const bool u8 = type == DType::kUInt8;
    ref::TensorMap feeds = {{"xq", RandomInts(type, {2, 16, 9, 9}, u8 ? 0 : -128, u8 ? 255 : 127, 2)}};
    EXPECT_TRUE(testing::RunPassAndCompare(*g, passes::FuseQdq, feeds));
    EXPECT_EQ(CountOps(*g, "MaxPool"), 1);
    EXPECT_EQ(CountOps(*g, "QuantizeLinear") + CountOps(*g, "DequantizeLinear"), 0);
    CompileOptions co;
    co.pipeline.level = OptLevel::kO0;
    auto compiled = CompileGraph(*g, co);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    auto e = cpu::BuildCpuEngine(*compiled);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ((*e)->info().fallback_ops, 0);
    auto want = ref::Run(*compiled->graph, feeds);
    std::vector<Tensor> outs;
    ASSERT_TRUE((*e)->Run({feeds.at("xq")}, outs).ok());
    for (int64_t i = 0; i < outs[0].numel(); ++i) {
      ASSERT_EQ(outs[0].GetDouble(i), want->begin()->second.GetDouble(i)) << i;
    }
  }
}

TEST(FuseQdqMaxPool, AnotherScaleAfterThePoolIsLeftAlone) {
  auto g = QdqMaxPool(DType::kUInt8, 0.07f);
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  auto changed = passes::FuseQdq(*g);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(CountOps(*g, "DequantizeLinear"), 1);
}

// The warm-up check compares an int8 model's float outputs within one 8-bit step of their
// range; a float model keeps the configured tolerance.
TEST(QuantizedTolerance, OneEightBitStepOfTheOutputRangeForQdqGraphsOnly) {
  ConvCase c{"tol"};
  QdqGraph q = BuildQdqConv(c);
  ref::TensorMap want = {{"out", Floats({-1.0f, 0.5f, 1.55f}, {3})},
                         {"ids", Tensor::FromInt64({1, 2, 3}, {3})}};
  check::Tolerance base;
  check::Tolerance t = check::ForQuantizedGraph(*q.graph, want, base);
  ASSERT_EQ(t.output_atol.count("out"), 1u);
  EXPECT_NEAR(t.output_atol.at("out"), 2.55 / 255.0, 1e-7);
  EXPECT_EQ(t.output_atol.count("ids"), 0u);  // integers compare exactly
  // Within the step (plus rtol) passes, beyond it fails; the base tolerance is tighter.
  ref::TensorMap near = {{"out", Floats({-1.0f + 0.009f, 0.5f, 1.55f}, {3})}, {"ids", want.at("ids")}};
  ref::TensorMap far = {{"out", Floats({-1.0f + 0.013f, 0.5f, 1.55f}, {3})}, {"ids", want.at("ids")}};
  EXPECT_TRUE(check::CompareOutputs(want, near, t).ok);
  EXPECT_FALSE(check::CompareOutputs(want, far, t).ok);
  EXPECT_FALSE(check::CompareOutputs(want, near, base).ok);
  GraphBuilder b;
  b.Output(b.Op("Relu", {b.Input("x", DType::kFloat32, {3})}));
  EXPECT_TRUE(check::ForQuantizedGraph(*b.Build(), want, base).output_atol.empty());
}

// A residual block in QDQ form: conv, conv, DQ + DQ -> Add -> Relu -> Q, conv. At O2 the
// convolutions are int8 and the Add one fused 8-bit program; the activations between them
// stay channels-last, so only the graph's input and output are reordered.
TEST(QdqResidualBlock, StaysChannelsLastBetweenInt8OpsAndMatchesTheReference) {
  GraphBuilder b;
  const DType u8 = DType::kUInt8;
  Value* s = b.Constant("s", Floats({0.05f}));
  Value* z = b.Constant("z", ByteScalar(u8, 0));
  int n = 0;
  auto dq = [&](Value* q) { return b.Op("DequantizeLinear", {q, s, z}); };
  auto q = [&](Value* f) { return b.Op("QuantizeLinear", {f, s, z}); };
  auto conv = [&](Value* xq) {
    const std::string k = std::to_string(n++);
    Value* w = b.Op("DequantizeLinear",
                    {b.Constant("wq" + k, RandomInts(DType::kInt8, {16, 16, 3, 3}, -60, 60, 20 + n)),
                     b.Constant("sw" + k, ChannelScales(16, 0.004f)),
                     b.Constant("zw" + k, Tensor(DType::kInt8, {16}))},
                    {{"axis", Attribute::Int(0)}});
    return q(b.Op("Relu", {b.Op("Conv", {dq(xq), w}, {{"pads", Attribute::Ints({1, 1, 1, 1})}})}));
  };
  Value* x = b.Input("xq", u8, {2, 16, 12, 12});
  Value* t1 = conv(x);
  Value* t2 = conv(t1);
  Value* t3 = q(b.Op("Relu", {b.Op("Add", {dq(t2), dq(t1)})}));
  b.Output(conv(t3));
  auto g = b.Build();
  CompileOptions co;
  co.batch = 2;
  auto compiled = CompileGraph(*g, co);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(CountOps(*compiled->graph, "QLinearConv"), 3);
  EXPECT_EQ(CountOps(*compiled->graph, "FusedElementwise"), 1);
  auto e = cpu::BuildCpuEngine(*compiled);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->info().fallback_ops, 0);
  EXPECT_LE((*e)->info().layout_reorders, 2);  // the input in, the output out
  Tensor xin = RandomInts(u8, {2, 16, 12, 12}, 0, 255, 8);
  auto want = ref::Run(*compiled->graph, {{"xq", xin}});
  ASSERT_TRUE(want.ok()) << want.status();
  std::vector<Tensor> outs;
  ASSERT_TRUE((*e)->Run({xin}, outs).ok());
  ExpectWithinFloatRequantization(outs[0], want->begin()->second, 100);
}

// ---------------------------------------------------------------- MatMul

}  // namespace
}  // namespace kiln
