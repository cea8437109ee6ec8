// Shared by the int8 tests (cpu_qdq_test.cc, cpu_qlinear_test.cc): integer and scale tensors,
// the QDQ convolution cases and graph, and the checks of a fused graph against the float one.
#pragma once

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

namespace kiln::qdq_test {

using ::kiln::testing::CountOps;

inline Tensor RandomInts(DType dtype, std::vector<int64_t> shape, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  Tensor t(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.SetInt(i, d(rng));
  return t;
}

inline Tensor Floats(std::vector<float> v, std::vector<int64_t> shape = {}) {
  return Tensor::FromFloat(v, std::move(shape));
}

inline Tensor ByteScalar(DType dtype, int v) {
  Tensor t(dtype, {});
  t.SetInt(0, v);
  return t;
}

// Per-channel scales around `base` (distinct, so a channel mix-up shows).
inline Tensor ChannelScales(int64_t n, float base) {
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
  int w_max = 127;      // weights in [-w_max, w_max]
  float clip_hi = 0.f;  // > 0: Clip(0, clip_hi) instead of the Relu
};

void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

struct QdqGraph {
  std::unique_ptr<Graph> graph;
  ref::TensorMap feeds;
};

// DQ(x) -> Conv(., DQ(w), bias) [-> Relu] -> Q as exporters write it; `conv_reader` adds a
// second reader of the Conv's result, `w_zero` a weight zero point.
inline QdqGraph BuildQdqConv(const ConvCase& c, bool conv_reader = false, int w_zero = 0) {
  GraphBuilder b;
  Value* xq = b.Input("xq", c.x_type, {1, c.channels, 10, 10});
  Value* x = b.Op("DequantizeLinear", {xq, b.Constant("sx", Floats({0.05f})),
                                       b.Constant("zx", ByteScalar(c.x_type, c.x_zero))});
  const int64_t oc = c.out_channels;
  Tensor wq = RandomInts(DType::kInt8, {oc, c.channels / c.group, 3, 3}, -127, 127, 5);
  Tensor sw = c.per_channel ? ChannelScales(oc, 0.01f) : Floats({0.01f});
  Tensor zw(DType::kInt8, sw.shape());
  for (int64_t i = 0; i < zw.numel(); ++i) zw.SetInt(i, w_zero);
  Value* w =
      b.Op("DequantizeLinear", {b.Constant("wq", wq), b.Constant("sw", sw), b.Constant("zw", zw)},
           {{"axis", Attribute::Int(0)}});
  std::vector<Value*> conv_in = {x, w};
  if (c.bias) {
    std::vector<float> bias;
    for (int64_t o = 0; o < oc; ++o) bias.push_back(0.1f * static_cast<float>(o % 7) - 0.3f);
    conv_in.push_back(b.Constant("bias", Floats(bias, {oc})));
  }
  Value* y = b.Op("Conv", conv_in,
                  {{"pads", Attribute::Ints({1, 1, 1, 1})},
                   {"group", Attribute::Int(c.group)},
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
inline void ExpectFusedWithinOneQuantum(QdqGraph& q) {
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
inline void ExpectWithinFloatRequantization(const Tensor& got, const Tensor& want,
                                            int64_t per = 500) {
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

}  // namespace kiln::qdq_test
