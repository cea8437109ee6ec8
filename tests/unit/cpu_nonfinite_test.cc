// Hostile values through the optimized CPU engine: NaN, +-Inf, -0, denormals and values near
// FLT_MAX in the inputs of fused convolutions, products, pools and element-wise programs must
// come out as the reference interpreter computes them on the raw graph (NaN where it has NaN,
// the same infinities), in both activation layouts and at every ISA level the ctest run caps.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "compiler/compile.h"
#include "ir/builder.h"
#include "ops/interpreter.h"
#include "runtime/check/compare.h"
#include "runtime/cpu/cpu_engine.h"

namespace kiln {
namespace {

Attribute Ints(std::vector<int64_t> v) { return Attribute::Ints(std::move(v)); }

Tensor Random(const std::vector<int64_t>& shape, int seed, float lo = -1.f, float hi = 1.f) {
  Tensor t(DType::kFloat32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = d(rng);
  return t;
}

// Random values with every kind of hostile value sprinkled in (about one element in 13).
Tensor Hostile(const std::vector<int64_t>& shape, int seed) {
  Tensor t = Random(shape, seed);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            -0.f,
                            1e-40f,   // denormal
                            -1e-42f,  // denormal
                            // Large, but products of a few of them stay finite in float (the
                            // reference accumulates in double: nearer FLT_MAX the two differ
                            // by a legitimate float overflow).
                            1e30f,
                            -1e30f};
  float* p = t.mutable_data<float>();
  std::mt19937 rng(seed + 1);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (rng() % 13 == 0) p[i] = specials[rng() % 8];
  }
  return t;
}

// One input: fill it all with one value (every NaN / every Inf) or sprinkle.
enum class Fill { kSprinkled, kAllNaN, kAllInf, kAllNegZero, kFinite };

Tensor Make(const std::vector<int64_t>& shape, Fill f, int seed) {
  switch (f) {
    case Fill::kSprinkled: return Hostile(shape, seed);
    case Fill::kFinite: return Random(shape, seed);
    default: break;
  }
  Tensor t(DType::kFloat32, shape);
  const float v = f == Fill::kAllNaN ? std::numeric_limits<float>::quiet_NaN()
                  : f == Fill::kAllInf ? std::numeric_limits<float>::infinity()
                                       : -0.f;
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = v;
  return t;
}

// The raw graph on the reference against the O2-compiled graph on the CPU engine.
void ExpectSameAsReference(const Graph& g, const std::vector<int64_t>& in_shape) {
  CompileOptions co;
  co.pipeline.level = OptLevel::kO2;
  auto compiled = CompileGraph(g, co);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  for (auto layout : {cpu::ActivationLayout::kPrimitive, cpu::ActivationLayout::kBlocked}) {
    cpu::CpuEngineOptions eo;
    eo.layout = layout;
    auto engine = cpu::BuildCpuEngine(*compiled, eo);
    ASSERT_TRUE(engine.ok()) << engine.status();
    int seed = 10;
    for (Fill f : {Fill::kFinite, Fill::kSprinkled, Fill::kAllNaN, Fill::kAllInf,
                   Fill::kAllNegZero, Fill::kFinite}) {
      SCOPED_TRACE(testing::Message() << cpu::ActivationLayoutName(layout) << " fill "
                                      << static_cast<int>(f));
      const Tensor x = Make(in_shape, f, ++seed);
      auto want = ref::Run(g, {{"x", x}});
      ASSERT_TRUE(want.ok()) << want.status();
      std::vector<Tensor> out;
      ASSERT_TRUE((*engine)->Run({x}, out).ok());
      const check::Divergence d =
          check::CompareTensors(out[0], want->at((*engine)->outputs()[0].name), {1e-3, 1e-4});
      EXPECT_TRUE(d.ok) << d.message;
    }
  }
}

std::unique_ptr<Graph> ConvThen(const std::string& act, bool residual) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 8, 6, 6});
  Value* c = b.Op("Conv", {x, b.Constant("w", Random({8, 8, 3, 3}, 1)), b.Constant("b", Random({8}, 2))},
                  {{"pads", Ints({1, 1, 1, 1})}});
  if (residual) c = b.Op("Add", {c, x});
  if (act == "Clip") {
    c = b.Op("Clip", {c, b.Constant("lo", Tensor::Scalar(DType::kFloat32, 0.f)), b.Constant("hi", Tensor::Scalar(DType::kFloat32, 6.f))});
  } else if (!act.empty()) {
    c = b.Op(act, {c});
  }
  b.Output(c);
  return b.Build();
}

TEST(CpuNonFinite, FusedConvolutionEpilogues) {
  for (const std::string act : {"Relu", "Clip", "HardSigmoid", "Sigmoid", "Tanh", "LeakyRelu", ""}) {
    for (bool residual : {false, true}) {
      SCOPED_TRACE(act + (residual ? " + residual" : ""));
      ExpectSameAsReference(*ConvThen(act, residual), {1, 8, 6, 6});
    }
  }
}

TEST(CpuNonFinite, ReluBeforeTheResidualAdd) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 8, 5, 5});
  Value* c = b.Op("Relu", {b.Op("Conv", {x, b.Constant("w", Random({8, 8, 1, 1}, 3))})});
  b.Output(b.Op("Relu", {b.Op("Add", {c, x})}));
  ExpectSameAsReference(*b.Build(), {1, 8, 5, 5});
}

TEST(CpuNonFinite, ProductsWithEpilogues) {
  for (const std::string act : {"Relu", "Clip", "Sigmoid", "Gelu", ""}) {
    SCOPED_TRACE(act);
    GraphBuilder b;
    Value* x = b.Input("x", DType::kFloat32, {4, 16});
    Value* y = b.Op("Gemm", {x, b.Constant("w", Random({16, 8}, 4)), b.Constant("c", Random({8}, 5))});
    if (act == "Clip") {
      y = b.Op("Clip", {y, b.Constant("lo", Tensor::Scalar(DType::kFloat32, -1.f)), b.Constant("hi", Tensor::Scalar(DType::kFloat32, 1.f))});
    } else if (!act.empty()) {
      y = b.Op(act, {y});
    }
    b.Output(y);
    ExpectSameAsReference(*b.Build(), {4, 16});
  }
}

TEST(CpuNonFinite, Pools) {
  for (const std::string op : {"MaxPool", "AveragePool", "GlobalAveragePool"}) {
    SCOPED_TRACE(op);
    GraphBuilder b;
    Value* x = b.Input("x", DType::kFloat32, {1, 8, 6, 6});
    // A convolution first, so the pool reads a blocked layout in the blocked build.
    Value* c = b.Op("Conv", {x, b.Constant("w", Random({16, 8, 1, 1}, 6))});
    std::map<std::string, Attribute> attrs;
    if (op != "GlobalAveragePool") {
      attrs = {{"kernel_shape", Ints({3, 3})}, {"strides", Ints({2, 2})}, {"pads", Ints({1, 1, 1, 1})}};
    }
    b.Output(b.Op(op, {c}, attrs));
    ExpectSameAsReference(*b.Build(), {1, 8, 6, 6});
  }
}

TEST(CpuNonFinite, ElementwisePrograms) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 33});
  Value* m = b.Op("Max", {x, b.Constant("z", Tensor::Scalar(DType::kFloat32, 0.f))});
  Value* n = b.Op("Min", {m, b.Constant("s", Tensor::Scalar(DType::kFloat32, 6.f))});
  Value* h = b.Op("HardSigmoid", {b.Op("Mul", {n, x})});
  b.Output(b.Op("Add", {h, b.Op("HardSwish", {x})}));
  ExpectSameAsReference(*b.Build(), {2, 33});
}

TEST(CpuNonFinite, SoftmaxLayerNormAndReductions) {
  for (const std::string op : {"Softmax", "LayerNormalization", "ReduceMax", "ReduceSum"}) {
    SCOPED_TRACE(op);
    GraphBuilder b;
    Value* x = b.Input("x", DType::kFloat32, {3, 7});
    Value* y = nullptr;
    if (op == "LayerNormalization") {
      y = b.Op(op, {x, b.Constant("g", Random({7}, 8)), b.Constant("b", Random({7}, 9))});
    } else if (op == "Softmax") {
      y = b.Op(op, {x});
    } else {
      y = b.Op(op, {x, b.Constant("axes", Tensor::FromInt64({1}, {1}))});
    }
    b.Output(y);
    ExpectSameAsReference(*b.Build(), {3, 7});
  }
}

// Bounds recorded for the guards (nonfinite_guard.h) carried past kernels that are not
// guarded: a concatenation of two convolutions' outputs read by a max pool; a scale/shift/ReLU
// program over it (or over one convolution's output) read by a convolution with a fused ReLU.
// A bound carried too far would let the pool or the fused ReLU run on NaN or inf and drop
// it; a scale with inf or NaN in it must not give a bound at all, nor a piece whose bound is
// not known. `what`: "pool", "program",
// "program over one".
std::unique_ptr<Graph> BoundCarrier(const std::string& what, float odd_scale) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 8, 6, 6});
  auto conv_relu = [&](Value* in, int64_t cin, int seed) {
    Value* w = b.Constant("w" + std::to_string(seed), Random({16, cin, 1, 1}, seed));
    return b.Op("Relu", {b.Op("Conv", {in, w})});
  };
  Value* a = conv_relu(x, 8, 21);
  // The second piece through a program of its own (an odd value added where the pool is
  // asked): no bound recorded for it, so none for the concatenation either.
  Tensor odd = Random({16, 1, 1}, 26);
  if (what == "pool") odd.mutable_data<float>()[5] = odd_scale;
  Value* second = b.Op("Abs", {b.Op("Add", {conv_relu(x, 8, 22), b.Constant("odd", odd)})});
  Value* cat =
      what == "program over one" ? a : b.Op("Concat", {a, second}, {{"axis", Attribute::Int(1)}});
  const int64_t c = what == "program over one" ? 16 : 32;
  if (what == "pool") {
    b.Output(
        b.Op("MaxPool", {cat}, {{"kernel_shape", Ints({3, 3})}, {"pads", Ints({1, 1, 1, 1})}}));
    return b.Build();
  }
  Tensor scale = Random({c, 1, 1}, 23);
  scale.mutable_data<float>()[3] = odd_scale;
  Value* m = b.Op("Mul", {cat, b.Constant("scale", scale)});
  Value* r = b.Op("Relu", {b.Op("Add", {m, b.Constant("shift", Random({c, 1, 1}, 24))})});
  b.Output(conv_relu(r, c, 25));
  return b.Build();
}

TEST(CpuNonFinite, BoundsCarriedPastConcatenationsAndPrograms) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const std::string what : {"pool", "program", "program over one"}) {
    for (float odd : {0.5f, inf, -inf, std::numeric_limits<float>::quiet_NaN()}) {
      SCOPED_TRACE(what + " scale " + std::to_string(odd));
      ExpectSameAsReference(*BoundCarrier(what, odd), {1, 8, 6, 6});
    }
  }
}

}  // namespace
}  // namespace kiln
