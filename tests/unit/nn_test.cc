// The NN operator family: reference kernels checked against hand-computed numbers, shape
// rules (symbolic batch), and the errors hostile attributes must produce.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ops/interpreter.h"

namespace kiln {
namespace {

using Attrs = std::map<std::string, Attribute>;

// Runs one node whose inputs are graph inputs fed with `inputs` (an undefined Tensor is an
// omitted optional input), after shape inference.
absl::StatusOr<std::vector<Tensor>> RunOp(const std::string& op, const std::vector<Tensor>& inputs,
                                          Attrs attrs = {}, size_t num_outputs = 1) {
  GraphBuilder b;
  std::vector<Value*> ins;
  ref::TensorMap feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      ins.push_back(nullptr);
      continue;
    }
    const std::string name = "in" + std::to_string(i);
    ins.push_back(b.Input(name, inputs[i].dtype(), ToShape(inputs[i].shape())));
    feeds[name] = inputs[i];
  }
  std::vector<Value*> outs = b.OpN(op, ins, num_outputs, std::move(attrs));
  for (Value* o : outs) b.Output(o);
  std::unique_ptr<Graph> g = b.Build();
  RETURN_IF_ERROR(shape::InferShapes(*g));
  ASSIGN_OR_RETURN(ref::TensorMap result, ref::Run(*g, feeds));
  std::vector<Tensor> ordered;
  for (Value* o : g->outputs) {
    // The inferred shape must agree with what the kernel computed.
    if (o->shape && IsStatic(*o->shape)) {
      EXPECT_EQ(StaticDims(*o->shape), result[o->name].shape());
    }
    ordered.push_back(result[o->name]);
  }
  return ordered;
}

// Runs only the kernel (no shape inference), so kernel-side validation is what is tested.
absl::StatusOr<std::vector<Tensor>> RunKernel(const std::string& op,
                                              const std::vector<Tensor>& inputs, Attrs attrs,
                                              size_t num_outputs = 1) {
  GraphBuilder b;
  std::vector<Value*> ins;
  ref::KernelInputs kin;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ins.push_back(b.Input("in" + std::to_string(i), inputs[i].dtype(), {}));
    kin.push_back(&inputs[i]);
  }
  b.OpN(op, ins, num_outputs, std::move(attrs));
  std::unique_ptr<Graph> g = b.Build();
  return ref::RunNode(*g->nodes()[0], kin);
}

Tensor Floats(std::vector<float> v, std::vector<int64_t> shape) {
  return Tensor::FromFloat(v, std::move(shape));
}

Tensor Iota(std::vector<int64_t> shape, float start = 0.0f, float step = 1.0f) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = start + step * i;
  return t;
}

void ExpectValues(const Tensor& t, const std::vector<double>& want, double tol = 1e-5) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(t.GetDouble(i), want[i], tol) << "at " << i;
}

Attribute Ints(std::vector<int64_t> v) { return Attribute::Ints(std::move(v)); }

TEST(Conv, ThreeByThreeByHand) {
  // x = 0..8 as 3x3, w = 2x2 of ones: each output is the sum of a 2x2 block.
  auto r = RunOp("Conv", {Iota({1, 1, 3, 3}), Floats({1, 1, 1, 1}, {1, 1, 2, 2})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{1, 1, 2, 2}));
  ExpectValues((*r)[0], {8, 12, 20, 24});
}

TEST(Conv, PadsStridesBiasAndGroups) {
  // Two groups of one channel each; pads 1, stride 2: corners of the padded sums.
  Tensor x = Iota({1, 2, 3, 3});
  Tensor w = Floats({1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2}, {2, 1, 3, 3});
  Tensor bias = Floats({0.5f, -1.0f}, {2});
  auto r = RunOp("Conv", {x, w, bias},
                 {{"group", Attribute::Int(2)}, {"pads", Ints({1, 1, 1, 1})},
                  {"strides", Ints({2, 2})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{1, 2, 2, 2}));
  // Channel 0: windows around (0,0) (0,2) (2,0) (2,2) of 0..8.
  // Channel 1: same windows of 9..17, times 2.
  ExpectValues((*r)[0], {8.5, 12.5, 20.5, 24.5, 2 * 44 - 1, 2 * 48 - 1, 2 * 56 - 1, 2 * 60 - 1});
}

TEST(Conv, AutoPadSameUpperAnd1D) {
  auto r = RunOp("Conv", {Iota({1, 1, 5}), Floats({1, 1, 1}, {1, 1, 3})},
                 {{"auto_pad", Attribute::String("SAME_UPPER")}, {"strides", Ints({2})}});
  ASSERT_TRUE(r.ok()) << r.status();
  // out = ceil(5/2) = 3, total pad 2 -> 1 each side: windows [-1..1], [1..3], [3..5].
  ExpectValues((*r)[0], {1, 6, 7});
}

TEST(Conv, Float16RoundsOnce) {
  Tensor x(DType::kFloat16, {1, 1, 1, 2});
  x.SetDouble(0, 1.0);
  x.SetDouble(1, 1.0 / 1024);
  Tensor w(DType::kFloat16, {1, 1, 1, 2});
  w.SetDouble(0, 1.0);
  w.SetDouble(1, 1.0);
  auto r = RunOp("Conv", {x, w});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dtype(), DType::kFloat16);
  EXPECT_DOUBLE_EQ((*r)[0].GetDouble(0), 1.0 + 1.0 / 1024);
}

TEST(Conv, GroupNotDividingChannelsIsInvalid) {
  auto r = RunOp("Conv", {Iota({1, 3, 4, 4}), Iota({2, 1, 3, 3})}, {{"group", Attribute::Int(2)}});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
}

TEST(Conv, HostileAttributesAreInvalid) {
  const Tensor x = Iota({1, 1, 4, 4}), w = Iota({1, 1, 3, 3});
  for (const Attrs& attrs : std::vector<Attrs>{
           {{"strides", Ints({0, 1})}},
           {{"pads", Ints({-1, 0, 0, 0})}},
           {{"dilations", Ints({1, -2})}},
           {{"dilations", Ints({3, 3})}},  // extent 7 > 4
           {{"pads", Ints({1, 1})}},       // wrong length
           {{"auto_pad", Attribute::String("BOGUS")}},
           {{"group", Attribute::Int(0)}},
           {{"kernel_shape", Ints({2, 2})}},  // disagrees with W
           {{"strides", Ints({int64_t{1} << 62, 1})}}}) {
    auto r = RunOp("Conv", {x, w}, attrs);
    ASSERT_FALSE(r.ok()) << attrs.begin()->first;
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  }
  auto big = RunOp("Conv", {Iota({1, 1, 2, 2}), Iota({1, 1, 3, 3})});
  EXPECT_TRUE(absl::IsInvalidArgument(big.status())) << big.status();
}

// The same hostile attributes straight at the kernels (shape inference may be skipped by
// a caller), for Conv, ConvTranspose and the pools.
TEST(Conv, KernelsRejectHostileAttributesThemselves) {
  const Tensor x = Iota({1, 2, 4, 4}), w = Iota({2, 1, 3, 3}), wt = Iota({2, 1, 3, 3});
  const std::vector<Attrs> hostile{
      {{"strides", Ints({0, 1})}},
      {{"pads", Ints({-5, 0, 0, 0})}},
      {{"dilations", Ints({0, 1})}},
      {{"pads", Ints({1 << 30, 1 << 30, 1 << 30, 1 << 30})}, {"kernel_shape", Ints({3, 3})}},
      {{"group", Attribute::Int(3)}},
      {{"group", Attribute::Int(-1)}},
      {{"kernel_shape", Ints({9, 9})}},
      {{"output_padding", Ints({-1, 0})}},
      {{"output_shape", Ints({-4, 4})}},
      {{"auto_pad", Attribute::String("VALID")}, {"kernel_shape", Ints({5, 5})}},
      {{"storage_order", Attribute::Int(7)}, {"kernel_shape", Ints({9, 9})}}};
  for (const Attrs& attrs : hostile) {
    for (const char* op : {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool"}) {
      Attrs a = attrs;
      const bool pool = std::string(op).find("Pool") != std::string::npos;
      if (pool && !a.count("kernel_shape")) a["kernel_shape"] = Ints({3, 3});
      if (pool && a.count("group")) continue;  // pools have no group
      if (!pool && a.count("kernel_shape")) a["kernel_shape"] = Ints({2, 2});  // mismatches W
      std::vector<Tensor> in = pool ? std::vector<Tensor>{x}
                                    : std::vector<Tensor>{x, std::string(op) == "Conv" ? w : wt};
      auto r = RunKernel(op, in, a, std::string(op) == "MaxPool" ? 2 : 1);
      // Some attributes only matter to some operators; those may succeed, but never crash.
      if (!r.ok()) {
        EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << op << ": " << r.status();
      }
    }
  }
  EXPECT_FALSE(RunKernel("Conv", {x, w}, {{"group", Attribute::Int(3)}}).ok());
  EXPECT_FALSE(RunKernel("MaxPool", {x}, {{"kernel_shape", Ints({5, 5})}}).ok());
  EXPECT_FALSE(RunKernel("ConvTranspose", {x, wt}, {{"pads", Ints({4, 4, 4, 4})}}).ok());
}

// A sweep over small window attributes: every combination either runs, with the inferred
// shape equal to the computed one (RunOp checks), or fails with INVALID_ARGUMENT. Run under
// ASan/UBSan this is the out-of-bounds guard for the window loops.
TEST(Conv, AttributeSweepRunsOrFailsCleanly) {
  const Tensor x = Iota({1, 2, 5, 4}), w = Iota({2, 2, 2, 3}, -1.0f, 0.1f);
  int ran = 0;
  for (const char* pad : {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"}) {
    for (int64_t s = 1; s <= 3; ++s) {
      for (int64_t d = 1; d <= 3; ++d) {
        for (int64_t p = 0; p <= 3; ++p) {
          Attrs a{{"auto_pad", Attribute::String(pad)}, {"strides", Ints({s, s + 1})},
                  {"dilations", Ints({d, 1})}};
          if (std::string(pad) == "NOTSET") a["pads"] = Ints({p, 0, 1, p});
          for (const char* op : {"Conv", "ConvTranspose", "MaxPool", "AveragePool"}) {
            Attrs b = a;
            const bool pool = std::string(op).find("Pool") != std::string::npos;
            if (pool) b["kernel_shape"] = Ints({2, 3});
            if (pool) b["ceil_mode"] = Attribute::Int(p % 2);
            if (pool) b["count_include_pad"] = Attribute::Int(d % 2);
            auto r = pool ? RunOp(op, {x}, b) : RunOp(op, {x, w}, b);
            if (r.ok()) {
              ++ran;
            } else {
              EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << op << ": " << r.status();
            }
          }
        }
      }
    }
  }
  EXPECT_GT(ran, 300);
}

TEST(Conv, IntegerDTypeIsUnimplemented) {
  Tensor x(DType::kInt32, {1, 1, 3, 3}), w(DType::kInt32, {1, 1, 2, 2});
  auto r = RunOp("Conv", {x, w});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsUnimplemented(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("Conv"), std::string::npos);
}

TEST(ConvTranspose, OnesScatterAndOutputShape) {
  Tensor ones = Floats({1, 1, 1, 1}, {1, 1, 2, 2});
  auto r = RunOp("ConvTranspose", {ones, ones});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[0], {1, 2, 1, 2, 4, 2, 1, 2, 1});
  // Stride 2 with output_shape 5x5: natural size 4x4 (+1 via pads -1 at the end).
  auto s = RunOp("ConvTranspose", {ones, ones},
                 {{"strides", Ints({2, 2})}, {"output_shape", Ints({5, 5})}});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)[0].shape(), (std::vector<int64_t>{1, 1, 5, 5}));
  auto huge = RunOp("ConvTranspose", {ones, ones}, {{"strides", Ints({1 << 30, 1 << 30})}});
  EXPECT_TRUE(absl::IsInvalidArgument(huge.status())) << huge.status();
}

TEST(Pool, MaxPoolWithIndicesAndStorageOrder) {
  Tensor x = Floats({1, 5, 3, 2, 9, 4, 0, 7, 6}, {1, 1, 3, 3});
  Attrs a{{"kernel_shape", Ints({2, 2})}};
  auto r = RunOp("MaxPool", {x}, a, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[0], {9, 9, 9, 9});
  ExpectValues((*r)[1], {4, 4, 4, 4});
  a["storage_order"] = Attribute::Int(1);
  a["pads"] = Ints({0, 0, 1, 1});
  auto c = RunOp("MaxPool", {x}, a, 2);
  ASSERT_TRUE(c.ok()) << c.status();
  ExpectValues((*c)[0], {9, 9, 4, 9, 9, 6, 7, 7, 6});
  ExpectValues((*c)[1], {4, 4, 7, 4, 4, 8, 5, 5, 8});  // column-major: h + w * H
}

TEST(Pool, AveragePoolCountIncludePad) {
  Tensor x = Floats({1, 2, 3, 4}, {1, 1, 2, 2});
  Attrs a{{"kernel_shape", Ints({2, 2})}, {"pads", Ints({1, 1, 0, 0})}};
  auto r = RunOp("AveragePool", {x}, a);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[0], {1, 1.5, 2, 2.5});
  a["count_include_pad"] = Attribute::Int(1);
  auto c = RunOp("AveragePool", {x}, a);
  ASSERT_TRUE(c.ok()) << c.status();
  ExpectValues((*c)[0], {0.25, 0.75, 1, 2.5});
}

TEST(Pool, CeilModeDropsWindowStartingInPadding) {
  // in 4, k 2, s 2, pad_end 1: ceil gives 3 windows but the third would start at 4 (pad).
  Attrs a{{"kernel_shape", Ints({2})}, {"strides", Ints({2})}, {"pads", Ints({0, 1})},
          {"ceil_mode", Attribute::Int(1)}};
  auto r = RunOp("MaxPool", {Iota({1, 1, 4})}, a);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[0], {1, 3});
}

TEST(Pool, GlobalPoolsAndIntegerMaxPool) {
  auto r = RunOp("GlobalAveragePool", {Iota({1, 2, 2, 2})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{1, 2, 1, 1}));
  ExpectValues((*r)[0], {1.5, 5.5});
  Tensor u(DType::kUInt8, {1, 1, 2, 2});
  for (int i = 0; i < 4; ++i) u.SetInt(i, 250 + i);
  auto m = RunOp("MaxPool", {u}, {{"kernel_shape", Ints({2, 2})}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)[0].dtype(), DType::kUInt8);
  EXPECT_EQ((*m)[0].GetInt(0), 253);
  auto missing = RunOp("MaxPool", {Iota({1, 1, 4, 4})});
  EXPECT_TRUE(absl::IsInvalidArgument(missing.status()));
}

TEST(MatMul, VectorsBatchesAndIntegers) {
  auto v = RunOp("MatMul", {Floats({1, 2}, {2}), Floats({1, 2, 3, 4}, {2, 2})});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)[0].shape(), (std::vector<int64_t>{2}));
  ExpectValues((*v)[0], {7, 10});
  // [2,1,2,2] x [3,2,1] broadcasts to [2,3,2,1].
  auto b = RunOp("MatMul", {Iota({2, 1, 2, 2}), Iota({3, 2, 1})});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)[0].shape(), (std::vector<int64_t>{2, 3, 2, 1}));
  EXPECT_DOUBLE_EQ((*b)[0].GetDouble(11), 6 * 4 + 7 * 5);  // [1, 2, 1, 0]
  Tensor a(DType::kInt64, {1, 2}), c(DType::kInt64, {2, 1});
  a.SetInt(0, int64_t{1} << 60);
  a.SetInt(1, 3);
  c.SetInt(0, 1);
  c.SetInt(1, 5);
  auto i = RunOp("MatMul", {a, c});
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ((*i)[0].GetInt(0), (int64_t{1} << 60) + 15);  // exact: no double rounding
  auto bad = RunOp("MatMul", {Iota({2, 3}), Iota({2, 3})});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
}

TEST(Gemm, TransposesAlphaBetaAndBroadcastC) {
  // A^T = [[1,2],[3,4]] given as A = [[1,3],[2,4]]; B^T = identity.
  Tensor a = Floats({1, 3, 2, 4}, {2, 2}), b = Floats({1, 0, 0, 1}, {2, 2});
  Tensor c = Floats({10, 20}, {2});
  auto r = RunOp("Gemm", {a, b, c},
                 {{"transA", Attribute::Int(1)}, {"transB", Attribute::Int(1)},
                  {"alpha", Attribute::Float(2.0f)}, {"beta", Attribute::Float(0.5f)}});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[0], {7, 14, 11, 18});
  auto no_c = RunOp("Gemm", {a, b});
  ASSERT_TRUE(no_c.ok()) << no_c.status();
  ExpectValues((*no_c)[0], {1, 3, 2, 4});
}

TEST(Softmax, SoftmaxLogSoftmaxHardmax) {
  Tensor x = Floats({1, 2, 3, 3, 0, 0}, {2, 3});
  auto s = RunOp("Softmax", {x});
  ASSERT_TRUE(s.ok()) << s.status();
  const double e = std::exp(1.0), z = 1 + e + e * e;
  ExpectValues((*s)[0], {1 / z, e / z, e * e / z, e * e * e / (e * e * e + 2), 1 / (e * e * e + 2),
                         1 / (e * e * e + 2)});
  auto l = RunOp("LogSoftmax", {x}, {{"axis", Attribute::Int(0)}});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_NEAR((*l)[0].GetDouble(0), 1 - std::log(e + e * e * e), 1e-6);
  auto h = RunOp("Hardmax", {Floats({1, 3, 3, 0}, {4})});
  ASSERT_TRUE(h.ok()) << h.status();
  ExpectValues((*h)[0], {0, 1, 0, 0});  // the first maximum wins
  auto bad = RunOp("Softmax", {x}, {{"axis", Attribute::Int(2)}});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
}

TEST(Norm, BatchNormInference) {
  Tensor x = Floats({1, 2, 3, 4}, {1, 2, 2, 1});
  Tensor scale = Floats({1, 2}, {2}), bias = Floats({0, 1}, {2});
  Tensor mean = Floats({1, 3}, {2}), var = Floats({4, 1}, {2});
  auto r = RunOp("BatchNormalization", {x, scale, bias, mean, var},
                 {{"epsilon", Attribute::Float(0.0f)}});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[0], {0, 0.5, 1, 3});
  auto bad = RunOp("BatchNormalization", {x, Floats({1, 2, 3}, {3}), bias, mean, var});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
}

TEST(Norm, LayerNormWithStatistics) {
  Tensor x = Floats({1, 3, 2, 6}, {2, 2});
  auto r = RunOp("LayerNormalization", {x, Floats({1, 1}, {2}), Floats({0, 1}, {2})},
                 {{"epsilon", Attribute::Float(0.0f)}}, 3);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[0], {-1, 2, -1, 2});
  EXPECT_EQ((*r)[1].shape(), (std::vector<int64_t>{2, 1}));
  ExpectValues((*r)[1], {2, 4});
  ExpectValues((*r)[2], {1, 0.5});
  auto bad = RunOp("LayerNormalization", {x, Floats({1, 1, 1}, {3})});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
}

TEST(Norm, GroupInstanceLpAndLrn) {
  Tensor x = Floats({1, 3, 5, 7}, {1, 2, 2});
  auto g = RunOp("GroupNormalization", {x, Floats({1, 1}, {2}), Floats({0, 0}, {2})},
                 {{"num_groups", Attribute::Int(1)}, {"epsilon", Attribute::Float(0.0f)}});
  ASSERT_TRUE(g.ok()) << g.status();
  const double sd = std::sqrt(5.0);
  ExpectValues((*g)[0], {-3 / sd, -1 / sd, 1 / sd, 3 / sd});
  auto bad = RunOp("GroupNormalization", {x, Floats({1, 1}, {2}), Floats({0, 0}, {2})},
                   {{"num_groups", Attribute::Int(3)}});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  auto in = RunOp("InstanceNormalization", {x, Floats({1, 2}, {2}), Floats({0, 1}, {2})},
                  {{"epsilon", Attribute::Float(0.0f)}});
  ASSERT_TRUE(in.ok()) << in.status();
  ExpectValues((*in)[0], {-1, 1, -1, 3});
  auto lp = RunOp("LpNormalization", {Floats({3, 4, 0, 0}, {2, 2})});
  ASSERT_TRUE(lp.ok()) << lp.status();
  ExpectValues((*lp)[0], {0.6, 0.8, 0, 0});
  auto mvn = RunOp("MeanVarianceNormalization", {Floats({1, 3, 10, 30}, {1, 2, 2, 1})});
  ASSERT_TRUE(mvn.ok()) << mvn.status();
  ExpectValues((*mvn)[0], {-1, 1, -1, 1});  // per channel over N, H, W
  auto lrn = RunOp("LRN", {Floats({1, 2}, {1, 2, 1, 1})},
                   {{"size", Attribute::Int(3)}, {"alpha", Attribute::Float(3.0f)},
                    {"beta", Attribute::Float(1.0f)}, {"bias", Attribute::Float(1.0f)}});
  ASSERT_TRUE(lrn.ok()) << lrn.status();
  ExpectValues((*lrn)[0], {1.0 / 6, 2.0 / 6});
}

TEST(Einsum, ExplicitImplicitDiagonalEllipsis) {
  Tensor m = Iota({3, 3});
  auto trace = RunOp("Einsum", {m}, {{"equation", Attribute::String("ii")}});
  ASSERT_TRUE(trace.ok()) << trace.status();
  ExpectValues((*trace)[0], {12});
  auto diag = RunOp("Einsum", {m}, {{"equation", Attribute::String("ii->i")}});
  ASSERT_TRUE(diag.ok()) << diag.status();
  ExpectValues((*diag)[0], {0, 4, 8});
  auto implicit = RunOp("Einsum", {Iota({2, 3}), Iota({3, 2})},
                        {{"equation", Attribute::String("ij,jk")}});
  ASSERT_TRUE(implicit.ok()) << implicit.status();
  ExpectValues((*implicit)[0], {10, 13, 28, 40});
  auto ell = RunOp("Einsum", {Iota({2, 1, 2}), Iota({3, 2})},
                   {{"equation", Attribute::String("...j,...j->...")}});
  ASSERT_TRUE(ell.ok()) << ell.status();
  EXPECT_EQ((*ell)[0].shape(), (std::vector<int64_t>{2, 3}));
  ExpectValues((*ell)[0], {1, 3, 5, 3, 13, 23});
  auto transpose = RunOp("Einsum", {Iota({2, 3})}, {{"equation", Attribute::String("ij->ji")}});
  ASSERT_TRUE(transpose.ok()) << transpose.status();
  ExpectValues((*transpose)[0], {0, 3, 1, 4, 2, 5});
  for (const char* bad : {"ij->k", "i.j", "ijk", "ij,jk", "i1"}) {
    auto r = RunOp("Einsum", {m}, {{"equation", Attribute::String(bad)}});
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << bad << ": " << r.status();
  }
}

TEST(Dropout, InferenceIsIdentityTrainingIsUnsupported) {
  Tensor x = Floats({1, 2, 3}, {3});
  auto r = RunOp("Dropout", {x}, {}, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[0], {1, 2, 3});
  EXPECT_EQ((*r)[1].dtype(), DType::kBool);
  ExpectValues((*r)[1], {1, 1, 1});
  Tensor on(DType::kBool, {});
  on.SetInt(0, 1);
  auto t = RunOp("Dropout", {x, Tensor::Scalar(DType::kFloat32, 0.5), on});
  EXPECT_TRUE(absl::IsUnimplemented(t.status())) << t.status();
}

// Shape inference keeps the symbolic batch and computes spatial sizes.
TEST(ShapeRules, SymbolicBatch) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("N"), 3, 32, 32});
  Value* w = b.Constant("w", Iota({8, 3, 3, 3}));
  Value* c = b.Op("Conv", {x, w}, {{"strides", Ints({2, 2})}, {"pads", Ints({1, 1, 1, 1})}});
  Value* p = b.Op("MaxPool", {c}, {{"kernel_shape", Ints({2, 2})}, {"strides", Ints({2, 2})}});
  Value* gp = b.Op("GlobalAveragePool", {p});
  Value* m = b.Op("MatMul", {p, b.Input("y", DType::kFloat32, {1, 8, 8, 5})});
  Value* e = b.Op("Einsum", {c}, {{"equation", Attribute::String("nchw->nhwc")}});
  Value* ln = b.OpN("LayerNormalization", {p, b.Constant("s", Iota({8}))}, 2,
                    {{"axis", Attribute::Int(-1)}})[1];
  std::unique_ptr<Graph> g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  const Dim n = Dim::Symbol("N");
  EXPECT_EQ(*c->shape, (Shape{n, 8, 16, 16}));
  EXPECT_EQ(*p->shape, (Shape{n, 8, 8, 8}));
  EXPECT_EQ(*gp->shape, (Shape{n, 8, 1, 1}));
  EXPECT_EQ(*m->shape, (Shape{n, 8, 8, 5}));
  EXPECT_EQ(*e->shape, (Shape{n, 16, 16, 8}));
  EXPECT_EQ(*ln->shape, (Shape{n, 8, 8, 1}));
  EXPECT_EQ(ln->dtype, DType::kFloat32);
}

TEST(ShapeRules, UnknownSpatialStaysUnknown) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 3, Dim::Symbol("H"), 32});
  Value* c = b.Op("Conv", {x, b.Constant("w", Iota({4, 3, 3, 3}))});
  std::unique_ptr<Graph> g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  EXPECT_EQ(*c->shape, (Shape{1, 4, Dim(), Dim()}));
}

// Not a benchmark: a guard against an accidentally quadratic or per-element-dispatch conv.
// ResNet-50's largest 3x3 layer shape must stay far below a second.
TEST(Performance, Conv3x3At56x56) {
  Tensor x = Iota({1, 64, 56, 56}, 0.0f, 1e-4f), w = Iota({64, 64, 3, 3}, -0.5f, 1e-5f);
  auto t0 = std::chrono::steady_clock::now();
  auto r = RunOp("Conv", {x, w}, {{"pads", Ints({1, 1, 1, 1})}});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.ok()) << r.status();
  std::printf("conv 1x64x56x56 3x3 64->64: %.3f s\n", s);
  EXPECT_LT(s, 2.0);
}

}  // namespace
}  // namespace kiln
