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

namespace kiln {
namespace {

using testing::CountOps;

Tensor RandomInts(DType dtype, std::vector<int64_t> shape, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  Tensor t(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.SetInt(i, d(rng));
  return t;
}

Tensor Floats(std::vector<float> v, std::vector<int64_t> shape = {}) {
  return Tensor::FromFloat(v, std::move(shape));
}

Tensor ByteScalar(DType dtype, int v) {
  Tensor t(dtype, {});
  t.SetInt(0, v);
  return t;
}

// Per-channel scales around `base` (distinct, so a channel mix-up shows).
Tensor ChannelScales(int64_t n, float base) {
  std::vector<float> v;
  for (int64_t c = 0; c < n; ++c) v.push_back(base * (1.f + 0.37f * static_cast<float>(c % 5)));
  return Floats(v, {n});
}

struct ConvCase {
  std::string name;
  DType x_type = DType::kUInt8, y_type = DType::kUInt8;
  int x_zero = 7, y_zero = 3;
  bool per_channel = true, bias = true, relu = false;
  int64_t group = 1, channels = 8, out_channels = 16, stride = 1;
  int w_max = 127;  // weights in [-w_max, w_max]
  float clip_hi = 0.f;  // > 0: Clip(0, clip_hi) instead of the Relu
};

void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

struct QdqGraph {
  std::unique_ptr<Graph> graph;
  ref::TensorMap feeds;
};

// DQ(x) -> Conv(., DQ(w), bias) [-> Relu] -> Q as exporters write it; `conv_reader` adds a
// second reader of the Conv's result, `w_zero` a weight zero point.
QdqGraph BuildQdqConv(const ConvCase& c, bool conv_reader = false, int w_zero = 0) {
  GraphBuilder b;
  Value* xq = b.Input("xq", c.x_type, {1, c.channels, 10, 10});
  Value* x = b.Op("DequantizeLinear", {xq, b.Constant("sx", Floats({0.05f})),
                                       b.Constant("zx", ByteScalar(c.x_type, c.x_zero))});
  const int64_t oc = c.out_channels;
  Tensor wq = RandomInts(DType::kInt8, {oc, c.channels / c.group, 3, 3}, -127, 127, 5);
  Tensor sw = c.per_channel ? ChannelScales(oc, 0.01f) : Floats({0.01f});
  Tensor zw(DType::kInt8, sw.shape());
  for (int64_t i = 0; i < zw.numel(); ++i) zw.SetInt(i, w_zero);
  Value* w = b.Op("DequantizeLinear", {b.Constant("wq", wq), b.Constant("sw", sw), b.Constant("zw", zw)},
                  {{"axis", Attribute::Int(0)}});
  std::vector<Value*> conv_in = {x, w};
  if (c.bias) {
    std::vector<float> bias;
    for (int64_t o = 0; o < oc; ++o) bias.push_back(0.1f * static_cast<float>(o % 7) - 0.3f);
    conv_in.push_back(b.Constant("bias", Floats(bias, {oc})));
  }
  Value* y = b.Op("Conv", conv_in,
                  {{"pads", Attribute::Ints({1, 1, 1, 1})}, {"group", Attribute::Int(c.group)},
                   {"strides", Attribute::Ints({c.stride, c.stride})}});
  if (conv_reader) b.Output(b.Op("Sigmoid", {y}));
  if (c.relu) y = b.Op("Relu", {y});
  if (c.clip_hi > 0) {
    y = b.Op("Clip", {y, b.Constant("lo", Floats({0.f})), b.Constant("hi", Floats({c.clip_hi}))});
  }
  b.Output(b.Op("QuantizeLinear", {y, b.Constant("sy", Floats({0.04f})),
                                   b.Constant("zy", ByteScalar(c.y_type, c.y_zero))}));
  QdqGraph q{b.Build(), {}};
  const bool u8 = c.x_type == DType::kUInt8;
  q.feeds["xq"] = RandomInts(c.x_type, {1, c.channels, 10, 10}, u8 ? 0 : -128, u8 ? 255 : 127, 9);
  return q;
}

// The pass changed the graph and the result moved by at most one quantum, on few elements
// (QLinearConv rounds acc * (sx * sw / sy) where the original rounds the float sum / sy).
void ExpectFusedWithinOneQuantum(QdqGraph& q) {
  ASSERT_TRUE(shape::InferShapes(*q.graph).ok());
  auto before = q.graph->Clone();
  absl::StatusOr<bool> changed = passes::FuseQdq(*q.graph);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_TRUE(VerifyGraph(*q.graph).ok());
  EXPECT_EQ(CountOps(*q.graph, "QLinearConv"), 1);
  EXPECT_EQ(CountOps(*q.graph, "Conv") + CountOps(*q.graph, "Relu") + CountOps(*q.graph, "Clip") +
                CountOps(*q.graph, "QuantizeLinear") + CountOps(*q.graph, "DequantizeLinear"),
            0);
  auto want = ref::Run(*before, q.feeds);
  auto got = ref::Run(*q.graph, q.feeds);
  ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
  const Tensor& a = got->begin()->second;
  const Tensor& e = want->begin()->second;
  ASSERT_EQ(a.shape(), e.shape());
  int64_t off = 0;
  for (int64_t i = 0; i < e.numel(); ++i) {
    const double d = std::fabs(a.GetDouble(i) - e.GetDouble(i));
    EXPECT_LE(d, 1.0) << "element " << i;
    off += d != 0;
  }
  EXPECT_LE(off, e.numel() / 100) << "more than 1% of the elements moved a quantum";
}

// The engine against the reference on the same (compiled) graph. oneDNN's int8 kernels
// requantize in float32 (acc * multiplier rounded to float, then to the nearest integer) where
// the reference multiplies in double, as ONNX's NumPy definition does: a product within float
// rounding of a .5 tie lands one quantum apart (ONNX Runtime's MLAS has the same property).
// So: at most one quantum, on a small share of the elements (1 in `per` of them: a chain of
// int8 ops compounds the flips); no difference otherwise.
void ExpectWithinFloatRequantization(const Tensor& got, const Tensor& want, int64_t per = 500) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  int64_t off = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double d = std::fabs(got.GetDouble(i) - want.GetDouble(i));
    EXPECT_LE(d, 1.0) << "element " << i << ": engine " << got.GetDouble(i) << ", reference "
                      << want.GetDouble(i);
    off += d != 0;
  }
  EXPECT_LE(off, std::max<int64_t>(2, want.numel() / per)) << "of " << want.numel();
}

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

struct MatMulCase {
  std::string name;
  DType a_type = DType::kUInt8, y_type = DType::kUInt8;
  bool per_column = true;
  int w_max = 127;
  int64_t k = 48;
};

void PrintTo(const MatMulCase& c, std::ostream* os) { *os << c.name; }

// DQ(a) -> MatMul(., DQ(b)) -> Q, or (`fused`) the QLinearMatMul it becomes.
std::unique_ptr<Graph> QdqMatMul(const MatMulCase& c, bool fused) {
  GraphBuilder b;
  Value* aq = b.Input("aq", c.a_type, {2, 5, c.k});
  const bool u8 = c.a_type == DType::kUInt8;
  Value* sa = b.Constant("sa", Floats({0.03f}));
  Value* za = b.Constant("za", ByteScalar(c.a_type, u8 ? 120 : -3));
  Value* bq = b.Constant("bq", RandomInts(DType::kInt8, {c.k, 24}, -c.w_max, c.w_max, 7));
  Value* sb = b.Constant("sb", c.per_column ? ChannelScales(24, 0.02f) : Floats({0.02f}));
  Value* sy = b.Constant("sy", Floats({0.05f}));
  Value* zy = b.Constant("zy", ByteScalar(c.y_type, c.y_type == DType::kUInt8 ? 128 : 0));
  if (fused) {
    Value* zb = b.Constant("zb", Tensor(DType::kInt8, c.per_column ? std::vector<int64_t>{24}
                                                                   : std::vector<int64_t>{}));
    b.Output(b.Op("QLinearMatMul", {aq, sa, za, bq, sb, zb, sy, zy}));
    return b.Build();
  }
  Value* a = b.Op("DequantizeLinear", {aq, sa, za});
  Value* w = b.Op("DequantizeLinear", {bq, sb}, {{"axis", Attribute::Int(1)}});
  b.Output(b.Op("QuantizeLinear", {b.Op("MatMul", {a, w}), sy, zy}));
  return b.Build();
}

Tensor MatMulInput(const MatMulCase& c) {
  const bool u8 = c.a_type == DType::kUInt8;
  return RandomInts(c.a_type, {2, 5, c.k}, u8 ? 0 : -128, u8 ? 255 : 127, 3);
}

class FuseQdqMatMul : public ::testing::TestWithParam<MatMulCase> {};

TEST_P(FuseQdqMatMul, BecomesQLinearMatMulWithinOneQuantum) {
  QdqGraph q{QdqMatMul(GetParam(), false), {{"aq", MatMulInput(GetParam())}}};
  ASSERT_TRUE(shape::InferShapes(*q.graph).ok());
  auto before = q.graph->Clone();
  auto changed = passes::FuseQdq(*q.graph);
  ASSERT_TRUE(changed.ok() && *changed);
  EXPECT_EQ(CountOps(*q.graph, "QLinearMatMul"), 1);
  EXPECT_EQ(CountOps(*q.graph, "MatMul") + CountOps(*q.graph, "QuantizeLinear"), 0);
  auto want = ref::Run(*before, q.feeds);
  auto got = ref::Run(*q.graph, q.feeds);
  ASSERT_TRUE(want.ok() && got.ok());
  const Tensor &e = want->begin()->second, &a = got->begin()->second;
  for (int64_t i = 0; i < e.numel(); ++i) EXPECT_LE(std::fabs(a.GetDouble(i) - e.GetDouble(i)), 1.0);
}

class CpuQLinearMatMul : public ::testing::TestWithParam<MatMulCase> {};

// Against the reference (ExpectWithinFloatRequantization), no fallback within the float
// path's bound.
TEST_P(CpuQLinearMatMul, MatchesTheReference) {
  const MatMulCase& c = GetParam();
  auto g = QdqMatMul(c, true);
  CompileOptions co;
  co.pipeline.level = OptLevel::kO0;
  auto compiled = CompileGraph(*g, co);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto e = cpu::BuildCpuEngine(*compiled);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->info().fallback_ops, 0);
  EXPECT_TRUE((*e)->info().slow_ops.empty());
  Tensor a = MatMulInput(c);
  auto want = ref::Run(*compiled->graph, {{"aq", a}});
  ASSERT_TRUE(want.ok()) << want.status();
  std::vector<Tensor> outs;
  ASSERT_TRUE((*e)->Run({a}, outs).ok());
  ExpectWithinFloatRequantization(outs[0], want->begin()->second);
}

const MatMulCase kMatMulCases[] = {
    {"u8_per_column"},
    {"u8_per_tensor_7bit", DType::kUInt8, DType::kUInt8, false, 64},
    {"s8_in_s8_out", DType::kInt8, DType::kInt8},
    {"u8_in_s8_out_long_k", DType::kUInt8, DType::kInt8, true, 127, 300},
};

INSTANTIATE_TEST_SUITE_P(Forms, FuseQdqMatMul, ::testing::ValuesIn(kMatMulCases),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Forms, CpuQLinearMatMul, ::testing::ValuesIn(kMatMulCases),
                         [](const auto& info) { return info.param.name; });

// Weights that are not a constant 2-D int8 matrix stay a float MatMul.
TEST(FuseQdqMatMulRefuses, BatchedWeights) {
  GraphBuilder b;
  Value* a = b.Op("DequantizeLinear", {b.Input("aq", DType::kUInt8, {2, 5, 8}),
                                       b.Constant("sa", Floats({0.03f}))});
  Value* w = b.Op("DequantizeLinear", {b.Constant("bq", RandomInts(DType::kInt8, {2, 8, 4}, -9, 9, 1)),
                                       b.Constant("sb", Floats({0.02f}))});
  b.Output(b.Op("QuantizeLinear", {b.Op("MatMul", {a, w}), b.Constant("sy", Floats({0.05f}))}));
  auto g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  auto changed = passes::FuseQdq(*g);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(CountOps(*g, "MatMul"), 1);
}

// ---------------------------------------------------------------- CPU engine QLinearConv

// QLinearConv as the pass writes it, built directly.
std::unique_ptr<Graph> QLinearConvGraph(const ConvCase& c) {
  GraphBuilder b;
  Value* xq = b.Input("xq", c.x_type, {2, c.channels, 10, 10});
  const int64_t oc = c.out_channels;
  Tensor sw = c.per_channel ? ChannelScales(oc, 0.01f) : Floats({0.01f});
  std::vector<Value*> in = {xq,
                            b.Constant("sx", Floats({0.05f})),
                            b.Constant("zx", ByteScalar(c.x_type, c.x_zero)),
                            b.Constant("wq", RandomInts(DType::kInt8,
                                                        {oc, c.channels / c.group, 3, 3},
                                                        -c.w_max, c.w_max, 5)),
                            b.Constant("sw", sw),
                            b.Constant("zw", Tensor(DType::kInt8, sw.shape())),
                            b.Constant("sy", Floats({0.04f})),
                            b.Constant("zy", ByteScalar(c.y_type, c.y_zero))};
  if (c.bias) in.push_back(b.Constant("bias", RandomInts(DType::kInt32, {oc}, -3000, 3000, 11)));
  b.Output(b.Op("QLinearConv", in,
                {{"pads", Attribute::Ints({1, 1, 1, 1})}, {"group", Attribute::Int(c.group)},
                 {"strides", Attribute::Ints({c.stride, c.stride})}}));
  return b.Build();
}

class CpuQLinearConv : public ::testing::TestWithParam<ConvCase> {};

// Against the reference in both activation layouts (ExpectWithinFloatRequantization), on
// oneDNN's JIT code where its integer sums are exact on this CPU.
TEST_P(CpuQLinearConv, MatchesTheReference) {
  const ConvCase& c = GetParam();
  auto g = QLinearConvGraph(c);
  CompileOptions co;
  co.pipeline.level = OptLevel::kO0;
  absl::StatusOr<CompiledGraph> compiled = CompileGraph(*g, co);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const bool u8 = c.x_type == DType::kUInt8;
  Tensor x = RandomInts(c.x_type, {2, c.channels, 10, 10}, u8 ? 0 : -128, u8 ? 255 : 127, 9);
  auto want = ref::Run(*compiled->graph, {{"xq", x}});
  ASSERT_TRUE(want.ok()) << want.status();
  for (auto layout : {cpu::ActivationLayout::kPrimitive, cpu::ActivationLayout::kBlocked}) {
    cpu::CpuEngineOptions eo;
    eo.layout = layout;
    auto e = cpu::BuildCpuEngine(*compiled, eo);
    ASSERT_TRUE(e.ok()) << e.status();
    // oneDNN's int8 kernels are exact for a uint8 source and 7-bit weights on every CPU,
    // beyond that with VNNI; elsewhere the float32 path is exact while a channel's
    // sum |w| * max|x - zx| stays within 2^24 (dnnl_qconv.cc); past both, the reference.
    const double bound = static_cast<double>(c.channels / c.group) * 9 * c.w_max * 255;
    if (bound <= 16777216.0) {
      EXPECT_EQ((*e)->info().fallback_ops, 0);
    }
    EXPECT_LE((*e)->info().fallback_ops, 1);
    EXPECT_TRUE((*e)->info().slow_ops.empty()) << (*e)->info().slow_ops[0];
    std::vector<Tensor> outs;
    ASSERT_TRUE((*e)->Run({x}, outs).ok());
    ExpectWithinFloatRequantization(outs[0], want->begin()->second);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Forms, CpuQLinearConv,
    ::testing::Values(ConvCase{"u8_per_channel_bias"},
                      ConvCase{"u8_7bit_weights", DType::kUInt8, DType::kUInt8, 7, 3, true,
                               true, false, 1, 8, 16, 1, 64},
                      ConvCase{"u8_7bit_weights_depthwise", DType::kUInt8, DType::kUInt8, 7, 3,
                               true, true, false, 8, 8, 8, 2, 64},
                      ConvCase{"u8_per_tensor_no_bias_zero_points_0", DType::kUInt8,
                               DType::kUInt8, 0, 0, false, false},
                      ConvCase{"s8_in_u8_out", DType::kInt8, DType::kUInt8, -5, 128},
                      ConvCase{"u8_in_s8_out", DType::kUInt8, DType::kInt8, 100, -3},
                      ConvCase{"depthwise_strided", DType::kUInt8, DType::kUInt8, 7, 3, true,
                               true, false, 8, 8, 8, 2},
                      ConvCase{"grouped", DType::kUInt8, DType::kUInt8, 7, 3, true, true, false,
                               2, 8, 16, 1},
                      ConvCase{"wide_reduction", DType::kUInt8,
                               DType::kUInt8, 0, 3, true, true, false, 1, 64, 16, 1}),
    [](const auto& info) { return info.param.name; });

// A weight zero point other than 0 has no oneDNN kernel: the node runs on the reference
// (a fallback op), still correct.
TEST(CpuQLinearConv, NonZeroWeightZeroPointFallsBackCorrectly) {
  GraphBuilder b;
  Value* xq = b.Input("xq", DType::kUInt8, {1, 4, 6, 6});
  Tensor zw(DType::kInt8, {});
  zw.SetInt(0, 2);
  b.Output(b.Op("QLinearConv",
                {xq, b.Constant("sx", Floats({0.05f})), b.Constant("zx", ByteScalar(DType::kUInt8, 1)),
                 b.Constant("wq", RandomInts(DType::kInt8, {4, 4, 3, 3}, -100, 100, 3)),
                 b.Constant("sw", Floats({0.02f})), b.Constant("zw", zw),
                 b.Constant("sy", Floats({0.1f})), b.Constant("zy", ByteScalar(DType::kUInt8, 9))}));
  auto g = b.Build();
  CompileOptions co;
  co.pipeline.level = OptLevel::kO0;
  auto compiled = CompileGraph(*g, co);
  ASSERT_TRUE(compiled.ok());
  auto e = cpu::BuildCpuEngine(*compiled);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)->info().fallback_ops, 1);
  Tensor x = RandomInts(DType::kUInt8, {1, 4, 6, 6}, 0, 255, 4);
  auto want = ref::Run(*compiled->graph, {{"xq", x}});
  std::vector<Tensor> outs;
  ASSERT_TRUE((*e)->Run({x}, outs).ok());
  for (int64_t i = 0; i < outs[0].numel(); ++i) {
    EXPECT_EQ(outs[0].GetDouble(i), want->begin()->second.GetDouble(i));
  }
}

}  // namespace
}  // namespace kiln
