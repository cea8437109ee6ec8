// QuantizeLinear / DequantizeLinear on the CPU engine, bit for bit against the reference
// interpreter: the own kernels (per tensor with constant or run-time parameters, per axis,
// every 8/16-bit type and int32 data) and QDQ programs fused by fuse_elementwise (DQ inputs,
// a Q output), at every ISA level the CPU has, on ties, saturation, negative zero points,
// NaN, infinities, signed zeros and denormals.
#include <cmath>
#include <cstring>
#include <limits>

#include "compiler/compile.h"
#include "compiler/passes/fuse_elementwise.h"
#include "compiler/shape/infer.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ops/interpreter.h"
#include "runtime/cpu/cpu_engine.h"
#include "runtime/cpu/isa.h"

namespace kiln {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Attribute Int(int64_t v) { return Attribute::Int(v); }

Tensor Floats(const std::vector<float>& v, std::vector<int64_t> shape) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::memcpy(t.mutable_data<float>(), v.data(), v.size() * sizeof(float));
  return t;
}

Tensor Typed(DType dtype, const std::vector<int64_t>& v, std::vector<int64_t> shape) {
  Tensor t(dtype, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.SetInt(static_cast<int64_t>(i), v[i]);
  return t;
}

uint64_t Next(uint64_t& s) {
  s = s * 6364136223846793005ULL + 1442695040888963407ULL;
  return s >> 11;
}

// `n` floats: the special values first (NaN, infinities, signed zeros, denormals, the float
// extremes), then exact ties k + 0.5 of x / scale of both parities, then uniform values over
// +-span (most in range, some saturating).
Tensor QuantInput(int64_t n, float scale, float span, uint64_t seed) {
  std::vector<float> v = {kNaN, -kNaN, kInf, -kInf, 0.f, -0.f, 1e-40f, -1e-40f,
                          std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(),
                          std::numeric_limits<float>::min(), 4194304.f * scale, -4194304.f * scale,
                          12582912.f * scale, 8388609.f * scale};
  // k = 0, -1, 1, -2, 2, ...: the small ties first (in range of every zero point).
  for (int j = 0; j <= 600 && static_cast<int64_t>(v.size()) < n / 2; ++j) {
    const int k = j % 2 ? -(j + 1) / 2 : j / 2;
    v.push_back((static_cast<float>(k) + 0.5f) * scale);  // exact when scale is a power of 2
  }
  uint64_t s = seed;
  while (static_cast<int64_t>(v.size()) < n) {
    const double u = static_cast<double>(Next(s) % 2000001) / 1000000.0 - 1.0;
    v.push_back(static_cast<float>(u * span));
  }
  v.resize(n);
  return Floats(v, {n});
}

// Every value of an integer type, repeated to n elements.
Tensor AllValues(DType t, int64_t n, uint64_t seed) {
  Tensor x(t, {n});
  uint64_t s = seed;
  for (int64_t i = 0; i < n; ++i) {
    switch (t) {
      case DType::kUInt8: x.SetInt(i, i % 256); break;
      case DType::kInt8: x.SetInt(i, i % 256 - 128); break;
      case DType::kUInt16: x.SetInt(i, static_cast<int64_t>(Next(s) % 65536)); break;
      case DType::kInt16: x.SetInt(i, static_cast<int64_t>(Next(s) % 65536) - 32768); break;
      default: {  // int32: the extremes and values beyond float's 24 bits
        const int64_t ends[] = {std::numeric_limits<int32_t>::min(),
                                std::numeric_limits<int32_t>::max(), 0, 16777217, -16777217};
        x.SetInt(i, i < 5 ? ends[i] : static_cast<int64_t>(static_cast<int32_t>(Next(s))));
      }
    }
  }
  return x;
}

// Bit-identical, except that any NaN equals any NaN.
void ExpectSameBits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  int bad = 0;
  const size_t es = DTypeSize(got.dtype());
  for (int64_t i = 0; i < got.numel() && bad < 5; ++i) {
    const char* a = static_cast<const char*>(got.raw()) + i * es;
    const char* b = static_cast<const char*>(want.raw()) + i * es;
    if (std::memcmp(a, b, es) == 0) continue;
    if (got.dtype() == DType::kFloat32 && std::isnan(got.GetDouble(i)) && std::isnan(want.GetDouble(i))) {
      continue;
    }
    ++bad;
    ADD_FAILURE() << what << " element " << i << ": engine " << got.GetDouble(i) << " reference "
                  << want.GetDouble(i);
  }
}

struct Outcome {
  CompileReport report;
  runtime::EngineInfo info;
};

// Compiles `g` at `level`, builds the CPU engine (primitive layout, no thread tuning so large
// tensors split across the team) and checks every output bit for bit against the reference
// run of the graph as built, at each ISA level the CPU has (own kernels dispatch per call).
Outcome ExpectBitExact(const Graph& g, const ref::TensorMap& feeds, OptLevel level) {
  Outcome o;
  CompileOptions co;
  co.pipeline.level = level;
  absl::StatusOr<CompiledGraph> c = CompileGraph(g, co);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return o;
  o.report = c->report;
  absl::StatusOr<ref::TensorMap> want = ref::Run(g, feeds);
  EXPECT_TRUE(want.ok()) << want.status();
  // The fused graph on the reference too: its FusedElementwise kernel runs the Q/DQ steps.
  absl::StatusOr<ref::TensorMap> want_fused = ref::Run(*c->graph, feeds);
  EXPECT_TRUE(want_fused.ok()) << want_fused.status();
  if (!want.ok() || !want_fused.ok()) return o;
  cpu::CpuEngineOptions eo;
  eo.layout = cpu::ActivationLayout::kPrimitive;
  eo.tune_threads = false;
  absl::StatusOr<std::unique_ptr<runtime::Engine>> e = cpu::BuildCpuEngine(*c, eo);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return o;
  o.info = (*e)->info();
  std::vector<Tensor> ins, outs;
  for (const auto& spec : (*e)->inputs()) ins.push_back(feeds.at(spec.name));
  const cpu::Isa saved = cpu::ActiveIsa();
  for (cpu::Isa isa : {cpu::Isa::kBaseline, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (isa > cpu::CpuIsa().detected) continue;
    cpu::SetActiveIsaForTesting(isa);
    absl::Status st = (*e)->Run(ins, outs);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) break;
    for (size_t k = 0; k < outs.size(); ++k) {
      const std::string& name = (*e)->outputs()[k].name;
      const std::string what = name + " at " + cpu::IsaName(isa);
      ExpectSameBits(outs[k], want->at(name), what);
      ExpectSameBits(want_fused->at(name), want->at(name), what + " (fused graph, reference)");
    }
  }
  cpu::SetActiveIsaForTesting(saved);
  return o;
}

int Count(const std::map<std::string, int>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? 0 : it->second;
}

TEST(CpuQuantize, QuantizePerTensorTiesSaturationAndNonFinite) {
  struct Case {
    DType t;
    float scale;
    int64_t zero;
  };
  const Case cases[] = {{DType::kUInt8, 0.5f, 128}, {DType::kUInt8, 0.25f, 0},
                        {DType::kUInt8, 0.1f, 255}, {DType::kInt8, 0.5f, -128},
                        {DType::kInt8, 0.0625f, -5}, {DType::kInt8, 3.f, 127},
                        {DType::kUInt16, 0.5f, 40000}, {DType::kInt16, 0.01f, -1000},
                        {DType::kUInt8, -0.5f, 10}};
  for (const Case& k : cases) {
    SCOPED_TRACE(DTypeName(k.t) + " scale " + std::to_string(k.scale) + " zero " +
                 std::to_string(k.zero));
    GraphBuilder b;
    const int64_t n = 3001;
    Value* x = b.Input("x", DType::kFloat32, {n});
    Value* s = b.Constant("s", Floats({k.scale}, {}));
    Value* z = b.Constant("z", Typed(k.t, {k.zero}, {}));
    b.Output(b.Op("QuantizeLinear", {x, s, z}));
    ref::TensorMap feeds = {{"x", QuantInput(n, k.scale, 300.f * std::fabs(k.scale), 7)}};
    Outcome o = ExpectBitExact(b.graph(), feeds, OptLevel::kO0);
    EXPECT_EQ(o.info.fallback_ops, 0);
  }
  // No zero point: uint8, or output_dtype's type.
  for (int64_t to : {0, 3}) {
    GraphBuilder b;
    Value* x = b.Input("x", DType::kFloat32, {2, 500});
    std::map<std::string, Attribute> attrs;
    if (to) attrs["output_dtype"] = Int(to);
    b.Output(b.Op("QuantizeLinear", {x, b.Constant("s", Floats({0.5f}, {1}))}, attrs));
    ref::TensorMap feeds = {{"x", QuantInput(1000, 0.5f, 200.f, 9).Reshaped({2, 500})}};
    EXPECT_EQ(ExpectBitExact(b.graph(), feeds, OptLevel::kO0).info.fallback_ops, 0);
  }
}

TEST(CpuQuantize, DequantizePerTensorEveryType) {
  struct Case {
    DType t;
    float scale;
    int64_t zero;
  };
  const Case cases[] = {{DType::kUInt8, 0.1f, 128}, {DType::kUInt8, 0.0039215689f, 0},
                        {DType::kInt8, 0.02f, -128}, {DType::kInt8, 1e-38f, 3},
                        {DType::kUInt16, 1.5e-5f, 32768}, {DType::kInt16, 0.3f, -7},
                        {DType::kInt32, 1e-3f, -123456789}, {DType::kInt32, 3.3e30f, 0},
                        {DType::kUInt8, 3e38f, 0}};
  for (const Case& k : cases) {
    SCOPED_TRACE(DTypeName(k.t) + " scale " + std::to_string(k.scale));
    GraphBuilder b;
    Value* x = b.Input("x", k.t, {4, 1000});
    b.Output(b.Op("DequantizeLinear",
                  {x, b.Constant("s", Floats({k.scale}, {})), b.Constant("z", Typed(k.t, {k.zero}, {1}))}));
    ref::TensorMap feeds = {{"x", AllValues(k.t, 4000, 3).Reshaped({4, 1000})}};
    EXPECT_EQ(ExpectBitExact(b.graph(), feeds, OptLevel::kO0).info.fallback_ops, 0);
  }
}

TEST(CpuQuantize, RuntimeScaleAndZeroPoint) {
  // The parameters are graph inputs: read from their slots on every run.
  for (DType t : {DType::kUInt8, DType::kInt8, DType::kInt32}) {
    SCOPED_TRACE(DTypeName(t));
    GraphBuilder b;
    Value* x = b.Input("x", DType::kFloat32, {700});
    Value* q = b.Input("q", t, {700});
    Value* s = b.Input("s", DType::kFloat32, {});
    Value* z = b.Input("z", t, {1});
    if (t != DType::kInt32) b.Output(b.Op("QuantizeLinear", {x, s, z}));
    b.Output(b.Op("DequantizeLinear", {q, s, z}));
    ref::TensorMap feeds = {{"x", QuantInput(700, 0.25f, 80.f, 5)},
                            {"q", AllValues(t, 700, 4)},
                            {"s", Floats({0.25f}, {})},
                            {"z", Typed(t, {t == DType::kUInt8 ? 200 : -100}, {1})}};
    EXPECT_EQ(ExpectBitExact(b.graph(), feeds, OptLevel::kO0).info.fallback_ops, 0);
  }
}

TEST(CpuQuantize, PerAxisInnerAndLastAxis) {
  const std::vector<float> scales = {0.5f, 0.1f, 0.03125f};
  for (int64_t axis : {1, -1, 0}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    GraphBuilder b;
    const std::vector<int64_t> shape = axis == 1 ? std::vector<int64_t>{2, 3, 7, 11}
                                      : axis == 0 ? std::vector<int64_t>{3, 50}
                                                  : std::vector<int64_t>{5, 13, 3};
    const int64_t n = NumElements(shape);
    Value* x = b.Input("x", DType::kFloat32, ToShape(shape));
    Value* q = b.Input("q", DType::kInt8, ToShape(shape));
    Value* s = b.Constant("s", Floats(scales, {3}));
    Value* z = b.Constant("z", Typed(DType::kInt8, {-128, 0, 100}, {3}));
    b.Output(b.Op("QuantizeLinear", {x, s, z}, {{"axis", Int(axis)}}));
    b.Output(b.Op("DequantizeLinear", {q, s, z}, {{"axis", Int(axis)}}));
    // The same with the parameters fed at run time (as ONNX's node tests feed them).
    Value* rs = b.Input("rs", DType::kFloat32, {3});
    Value* rz = b.Input("rz", DType::kInt8, {3});
    b.Output(b.Op("QuantizeLinear", {x, rs, rz}, {{"axis", Int(axis)}}));
    b.Output(b.Op("DequantizeLinear", {q, rs, rz}, {{"axis", Int(axis)}}));
    b.Output(b.Op("DequantizeLinear", {q, rs}, {{"axis", Int(axis)}}));
    ref::TensorMap feeds = {{"x", QuantInput(n, 0.5f, 60.f, 11).Reshaped(shape)},
                            {"q", AllValues(DType::kInt8, n, 2).Reshaped(shape)},
                            {"rs", Floats({0.25f, 0.7f, 2.f}, {3})},
                            {"rz", Typed(DType::kInt8, {5, -100, 127}, {3})}};
    EXPECT_EQ(ExpectBitExact(b.graph(), feeds, OptLevel::kO0).info.fallback_ops, 0);
  }
}

TEST(CpuQuantize, LargeTensorsSplitAcrossThreads) {
  // Above the parallel threshold, per tensor and per axis (channels of a [1, 64, 56, 56]).
  GraphBuilder b;
  const std::vector<int64_t> shape = {1, 64, 56, 56};
  const int64_t n = NumElements(shape);
  Value* x = b.Input("x", DType::kFloat32, ToShape(shape));
  Value* q = b.Input("q", DType::kUInt8, ToShape(shape));
  std::vector<float> cs(64);
  std::vector<int64_t> cz(64);
  for (int c = 0; c < 64; ++c) {
    cs[c] = 0.01f * static_cast<float>(c + 1);
    cz[c] = c * 4;
  }
  Value* s = b.Constant("s", Floats({0.125f}, {}));
  Value* z = b.Constant("z", Typed(DType::kUInt8, {77}, {}));
  b.Output(b.Op("QuantizeLinear", {x, s, z}));
  b.Output(b.Op("DequantizeLinear", {q, s, z}));
  b.Output(b.Op("QuantizeLinear", {x, b.Constant("cs", Floats(cs, {64})),
                                   b.Constant("cz", Typed(DType::kUInt8, cz, {64}))}));
  ref::TensorMap feeds = {{"x", QuantInput(n, 0.125f, 40.f, 13).Reshaped(shape)},
                          {"q", AllValues(DType::kUInt8, n, 1).Reshaped(shape)}};
  EXPECT_EQ(ExpectBitExact(b.graph(), feeds, OptLevel::kO0).info.fallback_ops, 0);
}

// DQ(a), DQ(b) -> Add -> Relu -> Q: one FusedElementwise reading two 8-bit tensors and
// writing one.
std::unique_ptr<Graph> QdqAddRelu(DType t, const std::vector<int64_t>& shape, int64_t za,
                                  int64_t zb, int64_t zy) {
  GraphBuilder b;
  Value* a = b.Input("a", t, ToShape(shape));
  Value* c = b.Input("b", t, ToShape(shape));
  Value* da = b.Op("DequantizeLinear", {a, b.Constant("sa", Floats({0.05f}, {})),
                                        b.Constant("za", Typed(t, {za}, {}))});
  Value* db = b.Op("DequantizeLinear", {c, b.Constant("sb", Floats({0.125f}, {1})),
                                        b.Constant("zb", Typed(t, {zb}, {1}))});
  Value* r = b.Op("Relu", {b.Op("Add", {da, db})});
  b.Output(b.Op("QuantizeLinear", {r, b.Constant("sy", Floats({0.1f}, {})),
                                   b.Constant("zy", Typed(t, {zy}, {}))}));
  return b.Build();
}

TEST(CpuQuantize, FusedDqDqAddReluQ) {
  for (DType t : {DType::kUInt8, DType::kInt8}) {
    SCOPED_TRACE(DTypeName(t));
    const bool u = t == DType::kUInt8;
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{1, 64, 56, 56}, std::vector<int64_t>{3, 5, 7}}) {
      std::unique_ptr<Graph> g = QdqAddRelu(t, shape, u ? 128 : -3, u ? 7 : -128, u ? 0 : -128);
      const int64_t n = NumElements(shape);
      ref::TensorMap feeds = {{"a", AllValues(t, n, 1).Reshaped(shape)},
                              {"b", AllValues(t, n, 2).Reshaped(shape)}};
      // b's values in another order, so a and b do not move together.
      Tensor& bt = feeds["b"];
      for (int64_t i = 0; i < n; ++i) bt.SetInt(i, (u ? 0 : -128) + (i * 37 + 11) % 256);
      Outcome o = ExpectBitExact(*g, feeds, OptLevel::kO2);
      EXPECT_EQ(Count(o.report.op_types_after, "ai.kiln.FusedElementwise"), 1);
      EXPECT_EQ(Count(o.report.op_types_after, "QuantizeLinear"), 0);
      EXPECT_EQ(Count(o.report.op_types_after, "DequantizeLinear"), 0);
      EXPECT_EQ(o.report.ops_after, 1u);
      EXPECT_EQ(o.info.fallback_ops, 0);
    }
  }
}

TEST(CpuQuantize, FusedProgramsBroadcastShortAndLongRows) {
  // A broadcast 8-bit operand (converted row by row, with a stride of 0 on some dims), in
  // packed short rows and in long rows cut into several tiles.
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{2, 3, 4, 5}, std::vector<int64_t>{2, 3, 2, 2500}}) {
    SCOPED_TRACE(ShapeToString(shape));
    GraphBuilder b;
    // Short rows: b is per-channel ([3, 1, 1], stride 0 along the rows); long: a row ([3, 1, W]).
    const std::vector<int64_t> bshape = {3, 1, shape.back() == 5 ? 1 : shape.back()};
    Value* a = b.Input("a", DType::kInt8, ToShape(shape));
    Value* c = b.Input("b", DType::kUInt8, ToShape(bshape));
    Value* da = b.Op("DequantizeLinear", {a, b.Constant("sa", Floats({0.5f}, {})),
                                          b.Constant("za", Typed(DType::kInt8, {-1}, {}))});
    Value* db = b.Op("DequantizeLinear", {c, b.Constant("sb", Floats({0.25f}, {})),
                                          b.Constant("zb", Typed(DType::kUInt8, {128}, {}))});
    b.Output(b.Op("QuantizeLinear", {b.Op("Sub", {da, db}), b.Constant("sy", Floats({0.5f}, {})),
                                     b.Constant("zy", Typed(DType::kInt8, {-7}, {}))}));
    ref::TensorMap feeds = {{"a", AllValues(DType::kInt8, NumElements(shape), 1).Reshaped(shape)},
                            {"b", AllValues(DType::kUInt8, NumElements(bshape), 2).Reshaped(bshape)}};
    Outcome o = ExpectBitExact(b.graph(), feeds, OptLevel::kO2);
    EXPECT_EQ(o.report.ops_after, 1u);
    EXPECT_EQ(o.info.fallback_ops, 0);
  }
}

TEST(CpuQuantize, FusedProgramsWithFloatOperandsAndNonFinite) {
  // A float input (NaN, infinities, ties) meets a dequantized one; the result quantizes to
  // int8 with a negative zero point; a second program requantizes (DQ -> Q) to uint8; a
  // third ends in a float (DQ -> Mul -> Relu).
  GraphBuilder b;
  const int64_t n = 2000;
  Value* x = b.Input("x", DType::kFloat32, {n});
  Value* q = b.Input("q", DType::kInt8, {n});
  Value* d = b.Op("DequantizeLinear", {q, b.Constant("s", Floats({0.5f}, {})),
                                       b.Constant("z", Typed(DType::kInt8, {-128}, {}))});
  Value* m = b.Op("Mul", {b.Op("Add", {d, x}), b.Constant("k", Floats({0.5f}, {}))});
  b.Output(b.Op("QuantizeLinear", {m, b.Constant("sy", Floats({0.5f}, {})),
                                   b.Constant("zy", Typed(DType::kInt8, {-100}, {}))}));
  Value* d2 = b.Op("DequantizeLinear", {q, b.Constant("s2", Floats({0.3f}, {}))});
  b.Output(b.Op("QuantizeLinear", {d2, b.Constant("s3", Floats({0.7f}, {})),
                                   b.Constant("z3", Typed(DType::kUInt8, {128}, {}))}));
  Value* d3 = b.Op("DequantizeLinear", {q, b.Constant("s4", Floats({0.01f}, {}))});
  b.Output(b.Op("Relu", {b.Op("Mul", {d3, x})}));
  // x = k + 0.5 ties: m / 0.5 = d + x is a tie for half of them.
  ref::TensorMap feeds = {{"x", QuantInput(n, 1.f, 100.f, 17)},
                          {"q", AllValues(DType::kInt8, n, 3)}};
  Outcome o = ExpectBitExact(b.graph(), feeds, OptLevel::kO2);
  EXPECT_EQ(Count(o.report.op_types_after, "ai.kiln.FusedElementwise"), 3);
  EXPECT_EQ(Count(o.report.op_types_after, "QuantizeLinear"), 0);
  EXPECT_EQ(Count(o.report.op_types_after, "DequantizeLinear"), 0);
  EXPECT_EQ(o.info.fallback_ops, 0);
}

TEST(CpuQuantize, PerAxisAndRuntimeParametersAreNotFused) {
  // A per-axis DQ and a Q whose scale is a graph input stay separate nodes (the fused
  // program only carries per-tensor constants) and still match the reference.
  GraphBuilder b;
  Value* a = b.Input("a", DType::kUInt8, {2, 3, 4});
  Value* c = b.Input("c", DType::kUInt8, {2, 3, 4});
  Value* sy = b.Input("sy", DType::kFloat32, {});
  Value* da = b.Op("DequantizeLinear", {a, b.Constant("sa", Floats({0.1f, 0.2f, 0.3f}, {3})),
                                        b.Constant("za", Typed(DType::kUInt8, {1, 2, 3}, {3}))});
  Value* dc = b.Op("DequantizeLinear", {c, b.Constant("sc", Floats({0.5f}, {}))});
  Value* r = b.Op("Relu", {b.Op("Sub", {da, dc})});
  b.Output(b.Op("QuantizeLinear", {r, sy, b.Constant("zy", Typed(DType::kUInt8, {3}, {}))}));
  ref::TensorMap feeds = {{"a", AllValues(DType::kUInt8, 24, 1).Reshaped({2, 3, 4})},
                          {"c", AllValues(DType::kUInt8, 24, 2).Reshaped({2, 3, 4})},
                          {"sy", Floats({0.05f}, {})}};
  Tensor& ct = feeds["c"];
  for (int64_t i = 0; i < 24; ++i) ct.SetInt(i, (i * 91) % 256);
  Outcome o = ExpectBitExact(b.graph(), feeds, OptLevel::kO2);
  EXPECT_EQ(Count(o.report.op_types_after, "DequantizeLinear"), 1);  // the per-axis one
  EXPECT_EQ(Count(o.report.op_types_after, "QuantizeLinear"), 1);    // run-time scale
  EXPECT_EQ(Count(o.report.op_types_after, "ai.kiln.FusedElementwise"), 1);  // DQ(c), Sub, Relu
  EXPECT_EQ(o.info.fallback_ops, 0);
}

TEST(CpuQuantize, FusibilityRules) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4});
  Value* q8 = b.Input("q8", DType::kUInt8, {4});
  Value* q16 = b.Input("q16", DType::kUInt16, {4});
  Value* s = b.Constant("s", Floats({0.5f}, {}));
  Value* s2 = b.Constant("s2", Floats({0.5f, 1.f}, {2}));
  Value* z = b.Constant("z", Typed(DType::kUInt8, {3}, {}));
  Value* zr = b.Input("zr", DType::kUInt8, {});
  std::vector<Value*> fusible = {b.Op("QuantizeLinear", {x, s, z}), b.Op("QuantizeLinear", {x, s}),
                                 b.Op("DequantizeLinear", {q8, s, z}),
                                 b.Op("QuantizeLinear", {x, s}, {{"output_dtype", Int(3)}})};
  std::vector<Value*> not_fusible = {
      b.Op("DequantizeLinear", {q8, s, zr}),  // run-time zero point
      b.Op("DequantizeLinear", {q16, s}),     // 16-bit
      b.Op("QuantizeLinear", {x, s2}, {{"axis", Int(0)}, {"block_size", Int(2)}}),  // blocked
      b.Op("QuantizeLinear", {x, s}, {{"output_dtype", Int(5)}})};                   // int16
  for (Value* v : fusible) b.Output(v);
  for (Value* v : not_fusible) b.Output(v);
  ASSERT_TRUE(shape::InferShapes(b.graph()).ok());
  for (Value* v : fusible) EXPECT_TRUE(passes::IsFusibleElementwise(*v->producer)) << v->name;
  for (Value* v : not_fusible) EXPECT_FALSE(passes::IsFusibleElementwise(*v->producer)) << v->name;
}

}  // namespace
}  // namespace kiln
