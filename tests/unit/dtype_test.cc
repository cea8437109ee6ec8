// The narrow ONNX element types (float8 x4, float8e8m0, float4e2m1, int4/uint4, int2/uint2):
// code <-> value conversion, rounding and saturation, packing at the ONNX boundary, and Cast.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "compiler/onnx/tensor_proto.h"
#include "ir/builder.h"
#include "ops/interpreter.h"

namespace kiln {
namespace {

using Attrs = std::map<std::string, Attribute>;

constexpr DType kFloat8s[] = {DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2,
                              DType::kFloat8E5M2FNUZ};

TEST(NarrowDType, SizesAndPredicates) {
  for (int v = 17; v <= 26; ++v) {
    const DType t = static_cast<DType>(v);
    EXPECT_EQ(DTypeSize(t), 1u) << DTypeName(t);
    EXPECT_TRUE(IsSupportedDType(t)) << DTypeName(t);
    EXPECT_TRUE(IsNarrowDType(t)) << DTypeName(t);
    EXPECT_FALSE(IsFloatDType(t) || IsIntegerDType(t)) << DTypeName(t);
  }
  EXPECT_EQ(SubByteBits(DType::kInt4), 4);
  EXPECT_EQ(SubByteBits(DType::kFloat4E2M1), 4);
  EXPECT_EQ(SubByteBits(DType::kUInt2), 2);
  EXPECT_EQ(SubByteBits(DType::kFloat8E4M3FN), 0);
  EXPECT_FALSE(IsNarrowDType(DType::kString));
}

TEST(NarrowDType, DecodesKnownCodes) {
  EXPECT_EQ(NarrowFloatToDouble(DType::kFloat8E4M3FN, 0x7e), 448.0);
  EXPECT_EQ(NarrowFloatToDouble(DType::kFloat8E4M3FN, 0x01), std::ldexp(1.0, -9));
  EXPECT_TRUE(std::isnan(NarrowFloatToDouble(DType::kFloat8E4M3FN, 0xff)));
  EXPECT_TRUE(std::signbit(NarrowFloatToDouble(DType::kFloat8E4M3FN, 0x80)));
  EXPECT_EQ(NarrowFloatToDouble(DType::kFloat8E4M3FNUZ, 0x7f), 240.0);
  EXPECT_EQ(NarrowFloatToDouble(DType::kFloat8E4M3FNUZ, 0x01), std::ldexp(1.0, -10));
  EXPECT_TRUE(std::isnan(NarrowFloatToDouble(DType::kFloat8E4M3FNUZ, 0x80)));
  EXPECT_EQ(NarrowFloatToDouble(DType::kFloat8E5M2, 0x7b), 57344.0);
  EXPECT_EQ(NarrowFloatToDouble(DType::kFloat8E5M2, 0xfc), -INFINITY);
  EXPECT_TRUE(std::isnan(NarrowFloatToDouble(DType::kFloat8E5M2, 0x7e)));
  EXPECT_EQ(NarrowFloatToDouble(DType::kFloat8E5M2FNUZ, 0x7f), 57344.0);
  EXPECT_EQ(NarrowFloatToDouble(DType::kFloat8E5M2FNUZ, 0x01), std::ldexp(1.0, -17));
  const double e2m1[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (uint8_t c = 0; c < 8; ++c) {
    EXPECT_EQ(NarrowFloatToDouble(DType::kFloat4E2M1, c), e2m1[c]);
    EXPECT_EQ(NarrowFloatToDouble(DType::kFloat4E2M1, c | 8), -e2m1[c]);
  }
  EXPECT_EQ(NarrowFloatToDouble(DType::kFloat8E8M0, 0x7f), 1.0);
  EXPECT_EQ(NarrowFloatToDouble(DType::kFloat8E8M0, 0x00), std::ldexp(1.0, -127));
  EXPECT_TRUE(std::isnan(NarrowFloatToDouble(DType::kFloat8E8M0, 0xff)));
}

// Every non-NaN code decodes to a value that encodes back to the same code.
TEST(NarrowDType, EveryCodeRoundTrips) {
  for (DType t : kFloat8s) {
    for (int c = 0; c < 256; ++c) {
      const double v = NarrowFloatToDouble(t, static_cast<uint8_t>(c));
      if (std::isnan(v)) continue;
      if (std::isinf(v)) {
        EXPECT_EQ(DoubleToFloat8(t, v, false), c) << DTypeName(t);
      } else {
        EXPECT_EQ(DoubleToFloat8(t, v, true), c) << DTypeName(t) << " code " << c;
      }
    }
  }
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(DoubleToFloat8(DType::kFloat4E2M1, NarrowFloatToDouble(DType::kFloat4E2M1, c), true),
              c);
  }
  for (int c = 0; c < 255; ++c) {
    EXPECT_EQ(DoubleToE8M0(NarrowFloatToDouble(DType::kFloat8E8M0, c), true, E8M0Rounding::kUp),
              c);
  }
}

TEST(NarrowDType, RoundsToNearestEven) {
  const DType t = DType::kFloat8E4M3FN;
  EXPECT_EQ(DoubleToFloat8(t, 1.0625, true), 0x38);  // tie between 1 and 1.125: even
  EXPECT_EQ(DoubleToFloat8(t, 1.1875, true), 0x3a);  // tie between 1.125 and 1.25: even
  EXPECT_EQ(DoubleToFloat8(t, 1.07, true), 0x39);
  EXPECT_EQ(DoubleToFloat8(t, std::ldexp(1.0, -10), true), 0x00);  // half the min subnormal
  EXPECT_EQ(DoubleToFloat8(t, std::ldexp(3.0, -10), true), 0x02);  // 1.5 subnormal steps: even
  EXPECT_EQ(DoubleToFloat8(t, -std::ldexp(1.0, -12), true), 0x80);  // negative zero
  EXPECT_EQ(DoubleToFloat8(DType::kFloat8E4M3FNUZ, -std::ldexp(1.0, -12), true), 0x00);
  EXPECT_EQ(DoubleToFloat8(DType::kFloat4E2M1, 0.25, true), 0x0);
  EXPECT_EQ(DoubleToFloat8(DType::kFloat4E2M1, 0.75, true), 0x2);
  EXPECT_EQ(DoubleToFloat8(DType::kFloat4E2M1, -3.5, true), 0xe);
  EXPECT_EQ(DoubleToFloat8(DType::kFloat4E2M1, 2.5, true), 0x4);
}

TEST(NarrowDType, SaturateOrOverflow) {
  const DType fn = DType::kFloat8E4M3FN;
  EXPECT_EQ(DoubleToFloat8(fn, 464.0, false), 0x7e);  // tie rounds down to 448: no overflow
  EXPECT_EQ(DoubleToFloat8(fn, 470.0, false), 0x7f);  // NaN: E4M3FN has no inf
  EXPECT_EQ(DoubleToFloat8(fn, 470.0, true), 0x7e);
  EXPECT_EQ(DoubleToFloat8(fn, -INFINITY, true), 0xfe);
  EXPECT_EQ(DoubleToFloat8(fn, NAN, true), 0x7f);
  EXPECT_EQ(DoubleToFloat8(DType::kFloat8E5M2, 1e6, false), 0x7c);
  EXPECT_EQ(DoubleToFloat8(DType::kFloat8E5M2, -INFINITY, false), 0xfc);
  EXPECT_EQ(DoubleToFloat8(DType::kFloat8E5M2, INFINITY, true), 0x7b);
  EXPECT_EQ(DoubleToFloat8(DType::kFloat8E5M2FNUZ, -1e6, false), 0x80);
  EXPECT_EQ(DoubleToFloat8(DType::kFloat8E5M2FNUZ, -1e6, true), 0xff);
  EXPECT_EQ(DoubleToFloat8(DType::kFloat8E4M3FNUZ, NAN, true), 0x80);
  EXPECT_EQ(DoubleToFloat8(DType::kFloat4E2M1, INFINITY, false), 0x7);
  EXPECT_EQ(DoubleToFloat8(DType::kFloat4E2M1, -100.0, false), 0xf);
}

TEST(NarrowDType, E8M0RoundingModes) {
  EXPECT_EQ(DoubleToE8M0(1.1, true, E8M0Rounding::kUp), 0x80);
  EXPECT_EQ(DoubleToE8M0(1.9, true, E8M0Rounding::kDown), 0x7f);
  EXPECT_EQ(DoubleToE8M0(1.4, true, E8M0Rounding::kNearest), 0x7f);
  EXPECT_EQ(DoubleToE8M0(1.6, true, E8M0Rounding::kNearest), 0x80);
  EXPECT_EQ(DoubleToE8M0(1.5, true, E8M0Rounding::kNearest), 0x80);  // tie: even code
  EXPECT_EQ(DoubleToE8M0(3.0, true, E8M0Rounding::kNearest), 0x80);
  EXPECT_EQ(DoubleToE8M0(0.0, true, E8M0Rounding::kUp), 0x00);
  EXPECT_EQ(DoubleToE8M0(INFINITY, true, E8M0Rounding::kUp), 0xfe);
  EXPECT_EQ(DoubleToE8M0(INFINITY, false, E8M0Rounding::kUp), 0xff);
  EXPECT_EQ(DoubleToE8M0(NAN, true, E8M0Rounding::kUp), 0xff);
}

TEST(NarrowDType, NarrowIntegersWrap) {
  EXPECT_EQ(WrapNarrowInt(DType::kInt4, -9), 7);
  EXPECT_EQ(WrapNarrowInt(DType::kInt4, 8), -8);
  EXPECT_EQ(WrapNarrowInt(DType::kUInt4, -1), 15);
  EXPECT_EQ(WrapNarrowInt(DType::kInt2, 3), -1);
  EXPECT_EQ(WrapNarrowInt(DType::kUInt2, 5), 1);
  Tensor t(DType::kInt4, {2});
  t.SetInt(0, -9);
  t.SetDouble(1, 7.9);
  EXPECT_EQ(t.GetInt(0), 7);
  EXPECT_EQ(t.GetDouble(1), 7.0);
}

TEST(NarrowDType, PacksLowNibbleFirst) {
  Tensor t(DType::kInt4, {5});
  const int64_t v[] = {7, -8, -1, 0, 3};
  for (int i = 0; i < 5; ++i) t.SetInt(i, v[i]);
  onnx::TensorProto p = onnx_io::TensorToProto(t, "t");
  EXPECT_EQ(p.raw_data(), std::string("\x87\x0f\x03", 3));
  auto back = onnx_io::TensorFromProto(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToInt64Vector(), (std::vector<int64_t>{7, -8, -1, 0, 3}));

  Tensor u(DType::kUInt2, {5});
  for (int i = 0; i < 5; ++i) u.SetInt(i, i);  // 0 1 2 3 0
  p = onnx_io::TensorToProto(u, "u");
  EXPECT_EQ(p.raw_data(), std::string("\xe4\x00", 2));
  back = onnx_io::TensorFromProto(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToInt64Vector(), (std::vector<int64_t>{0, 1, 2, 3, 0}));
}

TEST(NarrowDType, ReadsInt32DataAndChecksSizes) {
  onnx::TensorProto p;
  p.set_name("f4");
  p.set_data_type(static_cast<int32_t>(DType::kFloat4E2M1));
  p.add_dims(3);
  p.add_int32_data(0x72);  // 1.0, 6.0
  p.add_int32_data(0x0b);  // -1.5
  auto t = onnx_io::TensorFromProto(p);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->ToDoubleVector(), (std::vector<double>{1.0, 6.0, -1.5}));
  p.add_int32_data(0);  // one packed byte too many
  EXPECT_EQ(onnx_io::TensorFromProto(p).status().code(), absl::StatusCode::kInvalidArgument);

  onnx::TensorProto r;
  r.set_name("i4");
  r.set_data_type(static_cast<int32_t>(DType::kInt4));
  r.add_dims(3);
  r.set_raw_data(std::string("\x12\x34\x56", 3));  // needs 2 bytes, not 3
  EXPECT_EQ(onnx_io::TensorFromProto(r).status().code(), absl::StatusCode::kInvalidArgument);
}

absl::StatusOr<Tensor> RunOne(const std::string& op, const std::vector<Tensor>& xs, Attrs attrs) {
  GraphBuilder b;
  std::vector<Value*> ins;
  ref::TensorMap feeds;
  for (size_t i = 0; i < xs.size(); ++i) {
    const std::string name = "x" + std::to_string(i);
    ins.push_back(b.Input(name, xs[i].dtype(), ToShape(xs[i].shape())));
    feeds[name] = xs[i];
  }
  Value* y = b.Op(op, ins, std::move(attrs));
  b.Output(y);
  std::unique_ptr<Graph> g = b.Build();
  ASSIGN_OR_RETURN(ref::TensorMap out, ref::Run(*g, feeds));
  return out.at(y->name);
}

TEST(NarrowDType, CastHonoursSaturate) {
  Tensor x = Tensor::FromFloat({0.48f, 1e6f, -INFINITY, NAN}, {4});
  const Attribute to = Attribute::Int(static_cast<int>(DType::kFloat8E4M3FN));
  auto sat = RunOne("Cast", {x}, {{"to", to}});
  ASSERT_TRUE(sat.ok()) << sat.status();
  auto nosat = RunOne("Cast", {x}, {{"to", to}, {"saturate", Attribute::Int(0)}});
  ASSERT_TRUE(nosat.ok()) << nosat.status();
  const uint8_t* s = sat->data<uint8_t>();
  const uint8_t* n = nosat->data<uint8_t>();
  EXPECT_EQ(std::vector<int>(s, s + 4), (std::vector<int>{0x2f, 0x7e, 0xfe, 0x7f}));
  EXPECT_EQ(std::vector<int>(n, n + 4), (std::vector<int>{0x2f, 0x7f, 0xff, 0x7f}));
  // And back: float8 -> float is exact.
  auto f = RunOne("Cast", {*sat}, {{"to", Attribute::Int(static_cast<int>(DType::kFloat32))}});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->GetDouble(1), 448.0);
}

TEST(NarrowDType, CastToInt4WrapsAndE8M0RoundsByMode) {
  Tensor x = Tensor::FromFloat({-9.0f, 15.5f, 1.1f}, {3});
  auto y = RunOne("Cast", {x}, {{"to", Attribute::Int(static_cast<int>(DType::kInt4))}});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->ToInt64Vector(), (std::vector<int64_t>{7, -1, 1}));
  auto e = RunOne("Cast", {x}, {{"to", Attribute::Int(static_cast<int>(DType::kFloat8E8M0))},
                                {"round_mode", Attribute::String("down")}});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->ToDoubleVector(), (std::vector<double>{8.0, 8.0, 1.0}));
}

// Cast is the only consumer: arithmetic on a narrow type must stay UNIMPLEMENTED rather than
// silently computing on codes.
TEST(NarrowDType, ArithmeticOnFloat8IsUnimplemented) {
  Tensor a(DType::kFloat8E4M3FN, {2});
  auto y = RunOne("Add", {a, a}, {});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kUnimplemented) << y.status();
}

TEST(NarrowDType, CastToStringStaysUnimplemented) {
  auto y = RunOne("Cast", {Tensor::FromFloat({1.0f, 2.0f}, {2})},
                  {{"to", Attribute::Int(static_cast<int>(DType::kString))}});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kiln
