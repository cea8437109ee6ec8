// Int8 matrix products and convolutions: fuse_qdq on DQ -> MatMul -> Q (and its refusal of
// batched weights), and the CPU engine's QLinearMatMul and QLinearConv against the reference.
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
  for (int64_t i = 0; i < e.numel(); ++i)
    EXPECT_LE(std::fabs(a.GetDouble(i) - e.GetDouble(i)), 1.0);
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
  Value* a = b.Op("DequantizeLinear",
                  {b.Input("aq", DType::kUInt8, {2, 5, 8}), b.Constant("sa", Floats({0.03f}))});
  Value* w =
      b.Op("DequantizeLinear", {b.Constant("bq", RandomInts(DType::kInt8, {2, 8, 4}, -9, 9, 1)),
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
  std::vector<Value*> in = {
      xq,
      b.Constant("sx", Floats({0.05f})),
      b.Constant("zx", ByteScalar(c.x_type, c.x_zero)),
      b.Constant("wq",
                 RandomInts(DType::kInt8, {oc, c.channels / c.group, 3, 3}, -c.w_max, c.w_max, 5)),
      b.Constant("sw", sw),
      b.Constant("zw", Tensor(DType::kInt8, sw.shape())),
      b.Constant("sy", Floats({0.04f})),
      b.Constant("zy", ByteScalar(c.y_type, c.y_zero))};
  if (c.bias) in.push_back(b.Constant("bias", RandomInts(DType::kInt32, {oc}, -3000, 3000, 11)));
  b.Output(b.Op("QLinearConv", in,
                {{"pads", Attribute::Ints({1, 1, 1, 1})},
                 {"group", Attribute::Int(c.group)},
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
                      ConvCase{"u8_7bit_weights", DType::kUInt8, DType::kUInt8, 7, 3, true, true,
                               false, 1, 8, 16, 1, 64},
                      ConvCase{"u8_7bit_weights_depthwise", DType::kUInt8, DType::kUInt8, 7, 3,
                               true, true, false, 8, 8, 8, 2, 64},
                      ConvCase{"u8_per_tensor_no_bias_zero_points_0", DType::kUInt8, DType::kUInt8,
                               0, 0, false, false},
                      ConvCase{"s8_in_u8_out", DType::kInt8, DType::kUInt8, -5, 128},
                      ConvCase{"u8_in_s8_out", DType::kUInt8, DType::kInt8, 100, -3},
                      ConvCase{"depthwise_strided", DType::kUInt8, DType::kUInt8, 7, 3, true, true,
                               false, 8, 8, 8, 2},
                      ConvCase{"grouped", DType::kUInt8, DType::kUInt8, 7, 3, true, true, false, 2,
                               8, 16, 1},
                      ConvCase{"wide_reduction", DType::kUInt8, DType::kUInt8, 0, 3, true, true,
                               false, 1, 64, 16, 1}),
    [](const auto& info) { return info.param.name; });

// A weight zero point other than 0 has no oneDNN kernel: the node runs on the reference
// (a fallback op), still correct.
TEST(CpuQLinearConv, NonZeroWeightZeroPointFallsBackCorrectly) {
  GraphBuilder b;
  Value* xq = b.Input("xq", DType::kUInt8, {1, 4, 6, 6});
  Tensor zw(DType::kInt8, {});
  zw.SetInt(0, 2);
  b.Output(
      b.Op("QLinearConv",
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
