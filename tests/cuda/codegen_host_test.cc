// The CUDA code generator's kernels compiled for the host (kiln_host_shim.h) and compared
// with the reference interpreter node by node: index arithmetic, broadcasting, attributes,
// and non-finite values (NaN, +-inf, -0, denormals) kept as ONNX computes them.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "compiler/codegen/emit.h"
#include "compiler/codegen/epilogue_emitter.h"
#include "compiler/codegen/index_space.h"
#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ir/kiln_ops.h"
#include "tests/cuda/host_kernels.h"
#include "tests/cuda/kernel_check.h"

namespace kiln {
namespace {

using codegen::EmitNodeKernels;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Seeded values in [lo, hi]; with `specials`, NaN, +-inf, -0 and a denormal at the front.
Tensor Floats(std::vector<int64_t> shape, uint32_t seed, float lo = -3.f, float hi = 3.f,
              bool specials = true) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = d(rng);
  const float sp[] = {kNaN, kInf, -kInf, -0.f, 1e-40f};
  for (int64_t i = 0; specials && i < 5 && i < t.numel(); ++i) p[i * 3 % t.numel()] = sp[i];
  return t;
}

Tensor Ints(DType dt, std::vector<int64_t> shape, const std::vector<int64_t>& v) {
  Tensor t(dt, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.SetInt(i, v[static_cast<size_t>(i) % v.size()]);
  return t;
}

// One graph under test: graph inputs fed with tensors, constants for attribute-like inputs.
struct Case {
  GraphBuilder b;
  ref::TensorMap feeds;
  Value* In(const std::string& name, const Tensor& t) {
    feeds[name] = t;
    return b.Input(name, t.dtype(), ToShape(t.shape()));
  }
  Value* Const(const std::string& name, const Tensor& t) { return b.Constant(name, t); }
};

// Records every node of every case with a generator, compiles them all in one host module and
// compares them with the reference; returns how many nodes were checked.
int ExpectHostMatches(std::vector<Case>& cases, check::Tolerance tol = {1e-5, 1e-6}) {
  std::vector<testing::RecordedNode> nodes;
  testing::RecordStats stats;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::unique_ptr<Graph> g = cases[i].b.Build();
    EXPECT_TRUE(shape::InferShapes(*g).ok()) << "case " << i;
    std::shared_ptr<const Graph> shared(std::move(g));
    absl::Status st = testing::RecordGraph(shared, cases[i].feeds, "c" + std::to_string(i), nodes, stats);
    EXPECT_TRUE(st.ok()) << "case " << i << ": " << st;
  }
  EXPECT_TRUE(stats.errors.empty()) << stats.errors.front();
  EXPECT_EQ(stats.unsupported, 0);
  absl::StatusOr<testing::HostCheck> r = testing::CheckOnHost(nodes, tol);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return 0;
  for (const std::string& f : r->failures) ADD_FAILURE() << f;
  return r->checked;
}

TEST(CodegenHost, BinaryOpsBroadcastAndKeepNaN) {
  std::vector<Case> cases;
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu", "Mean", "Sum"}) {
    Case& c = cases.emplace_back();
    Value* a = c.In("a", Floats({2, 3, 4}, 1));
    Value* b = c.In("b", Floats({3, 1}, 2));
    c.b.Output(c.b.Op(op, {a, b}));
  }
  // Scalars, leading broadcast on both sides, and a variadic Max.
  Case& s = cases.emplace_back();
  s.b.Output(s.b.Op("Mul", {s.In("a", Floats({}, 3, 1, 2, false)), s.In("b", Floats({5}, 4))}));
  Case& both = cases.emplace_back();
  both.b.Output(both.b.Op("Add", {both.In("a", Floats({4, 1, 3}, 5)), both.In("b", Floats({2, 1}, 6))}));
  Case& var = cases.emplace_back();
  var.b.Output(var.b.Op("Max", {var.In("a", Floats({6}, 7)), var.In("b", Floats({6}, 8)), var.In("c", Floats({1}, 9))}));
  EXPECT_EQ(ExpectHostMatches(cases), 13);
}

TEST(CodegenHost, UnaryOpsAndActivations) {
  const std::vector<std::string> ops = {
      "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Relu", "Sigmoid", "Tanh", "Erf",
      "LeakyRelu", "HardSigmoid", "HardSwish", "Gelu", "Elu", "Celu", "Selu", "Softplus",
      "Softsign", "Mish", "ThresholdedRelu", "Shrink", "Ceil", "Floor", "Round", "Sign", "Sin",
      "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "IsNaN", "IsInf"};
  std::vector<Case> cases;
  for (const std::string& op : ops) {
    Case& c = cases.emplace_back();
    c.b.Output(c.b.Op(op, {c.In("x", Floats({3, 7}, 11, -4.f, 4.f))}));
  }
  Case& g = cases.emplace_back();
  g.b.Output(g.b.Op("Gelu", {g.In("x", Floats({9}, 12))}, {{"approximate", Attribute::String("tanh")}}));
  Case& l = cases.emplace_back();
  l.b.Output(l.b.Op("LeakyRelu", {l.In("x", Floats({9}, 13))}, {{"alpha", Attribute::Float(0.3f)}}));
  Case& r = cases.emplace_back();  // halves round to even
  r.b.Output(r.b.Op("Round", {r.In("x", Tensor::FromFloat({0.5f, 1.5f, 2.5f, -0.5f, -2.5f}, {5}))}));
  EXPECT_EQ(ExpectHostMatches(cases), static_cast<int>(ops.size()) + 3);
}

TEST(CodegenHost, ClipWhereCompareCastLogic) {
  std::vector<Case> cases;
  Case& c1 = cases.emplace_back();
  c1.b.Output(c1.b.Op("Clip", {c1.In("x", Floats({10}, 20)), c1.In("lo", Tensor::FromFloat({-1.f}, {})),
                               c1.In("hi", Tensor::FromFloat({1.5f}, {}))}));
  Case& c2 = cases.emplace_back();  // only an upper bound
  c2.b.Output(c2.b.Op("Clip", {c2.In("x", Floats({10}, 21)), nullptr, c2.In("hi", Tensor::FromFloat({0.5f}, {}))}));
  for (const char* op : {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"}) {
    Case& c = cases.emplace_back();
    c.b.Output(c.b.Op(op, {c.In("a", Floats({4, 5}, 22)), c.In("b", Floats({5}, 23))}));
  }
  Case& w = cases.emplace_back();
  Value* cond = w.b.Op("Less", {w.In("a", Floats({3, 4}, 24)), w.In("b", Floats({4}, 25))});
  w.b.Output(w.b.Op("Where", {cond, w.In("x", Ints(DType::kInt64, {3, 1}, {7, -8, 9})),
                              w.In("y", Ints(DType::kInt64, {4}, {1, 2, 3, 4}))}));
  for (DType to : {DType::kInt32, DType::kInt64, DType::kUInt8, DType::kInt8, DType::kBool, DType::kFloat64}) {
    Case& c = cases.emplace_back();  // NaN -> 0, out of range saturates, like the reference
    c.b.Output(c.b.Op("Cast", {c.In("x", Floats({12}, 26, -300.f, 300.f))}, {{"to", Attribute::Int(static_cast<int64_t>(to))}}));
  }
  Case& like = cases.emplace_back();  // CastLike: the second input gives only the dtype
  like.b.Output(like.b.Op("CastLike", {like.In("x", Floats({2, 3}, 27, -50.f, 50.f)),
                                       like.In("t", Ints(DType::kInt32, {7}, {0}))}));
  Case& i2f = cases.emplace_back();
  i2f.b.Output(i2f.b.Op("Cast", {i2f.In("x", Ints(DType::kInt64, {4}, {-3, 0, 5, 1 << 20}))},
                        {{"to", Attribute::Int(static_cast<int64_t>(DType::kFloat32))}}));
  Case& lg = cases.emplace_back();
  Value* p = lg.In("p", Ints(DType::kBool, {6}, {0, 1, 1, 0, 1, 0}));
  Value* q = lg.In("q", Ints(DType::kBool, {6}, {1, 1, 0, 0, 1, 1}));
  lg.b.Output(lg.b.Op("Xor", {lg.b.Op("And", {p, q}), lg.b.Op("Not", {lg.b.Op("Or", {p, q})})}));
  Case& ia = cases.emplace_back();
  ia.b.Output(ia.b.Op("Max", {ia.In("a", Ints(DType::kInt32, {5}, {-2, 9, 4, 0, 7})), ia.In("b", Ints(DType::kInt32, {1}, {3}))}));
  EXPECT_EQ(ExpectHostMatches(cases), 22);
}

// A FusedElementwise program as the fusion pass writes it: an attention mask's
// Cast -> Sub -> Mul, then a broadcast Add of a float input.
TEST(CodegenHost, FusedElementwiseProgramCastsOnLoad) {
  std::vector<Case> cases;
  Case& c = cases.emplace_back();
  Value* mask = c.In("mask", Ints(DType::kInt64, {2, 1, 1, 5}, {1, 1, 0, 1, 0}));
  Value* one = c.In("one", Tensor::FromFloat({1.f}, {}));
  Value* scores = c.In("scores", Floats({2, 3, 4, 5}, 30));
  Value* y = c.b.Op(kiln_ops::kFusedElementwise, {mask, one, scores},
                    {{"ops", Attribute::Strings({"Cast", "Sub", "Mul", "Add", "Relu"})},
                     {"arity", Attribute::Ints({1, 2, 2, 2, 1})},
                     {"operands", Attribute::Ints({0, 1, 3, 4, 1, 2, 5, 6})},
                     {"i0.to", Attribute::Int(static_cast<int64_t>(DType::kFloat32))},
                     {"dtype", Attribute::Int(static_cast<int64_t>(DType::kFloat32))}},
                    kKilnDomain);
  c.b.Output(y);
  EXPECT_EQ(ExpectHostMatches(cases), 1);
}

// A QDQ residual add as fuse_elementwise writes it: DQ(a), DQ(b) -> Add -> Relu -> Q, uint8
// in and out, with scalar scales and zero points; ties of x / scale and saturation included.
TEST(CodegenHost, FusedQuantizedAddMatchesTheReference) {
  std::vector<Case> cases;
  Case& c = cases.emplace_back();
  std::vector<int64_t> av, bv;
  for (int64_t i = 0; i < 2 * 3 * 4 * 5; ++i) {
    av.push_back((i * 37) % 256);
    bv.push_back((i * 101 + 7) % 256);
  }
  auto byte = [](DType t, int64_t v) {
    Tensor z(t, {});
    z.SetInt(0, v);
    return z;
  };
  Value* a = c.In("a", Ints(DType::kUInt8, {2, 3, 4, 5}, av));
  Value* b = c.In("b", Ints(DType::kUInt8, {2, 3, 4, 5}, bv));
  std::vector<Value*> in = {a, c.In("sa", Tensor::FromFloat({0.05f}, {})),
                            c.In("za", byte(DType::kUInt8, 128)), b,
                            c.In("sb", Tensor::FromFloat({0.025f}, {})),
                            c.In("zb", byte(DType::kUInt8, 3)),
                            c.In("sy", Tensor::FromFloat({0.05f}, {})),
                            c.In("zy", byte(DType::kUInt8, 0))};
  Value* y = c.b.Op(kiln_ops::kFusedElementwise, in,
                    {{"ops", Attribute::Strings({"DequantizeLinear", "DequantizeLinear", "Add",
                                                 "Relu", "QuantizeLinear"})},
                     {"arity", Attribute::Ints({3, 3, 2, 1, 3})},
                     {"operands", Attribute::Ints({0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 6, 7})},
                     {"dtype", Attribute::Int(static_cast<int64_t>(DType::kUInt8))}},
                    kKilnDomain);
  c.b.Output(y);
  EXPECT_EQ(ExpectHostMatches(cases, {0.0, 0.0}), 1);
}

// Single per-tensor QuantizeLinear / DequantizeLinear nodes (a QDQ model on the CUDA backend,
// where fuse_qdq stays off): ties, saturation, NaN and infinities as the reference.
TEST(CodegenHost, PerTensorQuantizeDequantizeNodes) {
  std::vector<Case> cases;
  for (DType t : {DType::kUInt8, DType::kInt8}) {
    Case& c = cases.emplace_back();
    Tensor x = Floats({3, 4, 10}, 40, -9.f, 9.f);
    float* p = x.mutable_data<float>();
    p[7] = 0.25f;   // x / scale = 2.5: a tie, to even (2)
    p[8] = 0.35f;   // 3.5 -> 4
    p[9] = 1e30f;   // saturates
    Tensor z(t, {});
    z.SetInt(0, t == DType::kUInt8 ? 100 : -7);
    Value* zv = c.Const("z", z);
    Value* s = c.Const("s", Tensor::FromFloat({0.1f}, {}));
    Value* q = c.b.Op("QuantizeLinear", {c.In("x", x), s, zv});
    c.b.Output(q);
    c.b.Output(c.b.Op("DequantizeLinear", {q, s, zv}));
  }
  EXPECT_EQ(ExpectHostMatches(cases, {0.0, 0.0}), 4);
}

TEST(CodegenHost, DataMovement) {
  std::vector<Case> cases;
  Case& t = cases.emplace_back();
  t.b.Output(t.b.Op("Transpose", {t.In("x", Floats({2, 3, 4, 5}, 40))}, {{"perm", Attribute::Ints({0, 2, 3, 1})}}));
  Case& sl = cases.emplace_back();  // negative step, clamped end, an axis subset
  sl.b.Output(sl.b.Op("Slice", {sl.In("x", Floats({4, 6, 5}, 41)), sl.Const("st", Tensor::FromInt64({5, 1}, {2})),
                                sl.Const("en", Tensor::FromInt64({-100, 4}, {2})),
                                sl.Const("ax", Tensor::FromInt64({1, 2}, {2})),
                                sl.Const("sp", Tensor::FromInt64({-2, 2}, {2}))}));
  Case& ex = cases.emplace_back();
  ex.b.Output(ex.b.Op("Expand", {ex.In("x", Floats({3, 1}, 42)), ex.Const("s", Tensor::FromInt64({2, 3, 4}, {3}))}));
  Case& cc = cases.emplace_back();
  cc.b.Output(cc.b.Op("Concat", {cc.In("a", Floats({2, 1, 3}, 43)), cc.In("b", Floats({2, 4, 3}, 44)),
                                 cc.In("c", Floats({2, 2, 3}, 45))}, {{"axis", Attribute::Int(-2)}}));
  Case& sp = cases.emplace_back();
  std::vector<Value*> parts = sp.b.OpN("Split", {sp.In("x", Floats({3, 7}, 46)), sp.Const("s", Tensor::FromInt64({2, 5}, {2}))}, 2,
                                       {{"axis", Attribute::Int(1)}});
  sp.b.Output(parts[0]);
  sp.b.Output(parts[1]);
  Case& ga = cases.emplace_back();  // negative indices, 2-D indices, a middle axis
  ga.b.Output(ga.b.Op("Gather", {ga.In("x", Floats({3, 5, 2}, 47)), ga.In("i", Ints(DType::kInt64, {2, 2}, {4, -1, 0, 2}))},
                      {{"axis", Attribute::Int(1)}}));
  Case& gi = cases.emplace_back();  // int32 indices into an int64 table (an embedding lookup)
  gi.b.Output(gi.b.Op("Gather", {gi.In("x", Ints(DType::kInt64, {4, 3}, {1, 2, 3, 4, 5, 6, 7})),
                                 gi.In("i", Ints(DType::kInt32, {3}, {3, 0, -2}))}));
  for (const char* mode : {"constant", "edge", "reflect", "wrap"}) {
    Case& pd = cases.emplace_back();  // a crop (negative pad) on the last dim
    pd.b.Output(pd.b.Op("Pad", {pd.In("x", Floats({2, 3, 4}, 48)), pd.Const("p", Tensor::FromInt64({0, 2, 1, 1, 1, -1}, {6})),
                                pd.Const("v", Tensor::FromFloat({2.5f}, {}))}, {{"mode", Attribute::String(mode)}}));
  }
  Case& ti = cases.emplace_back();
  ti.b.Output(ti.b.Op("Tile", {ti.In("x", Floats({2, 3}, 49)), ti.Const("r", Tensor::FromInt64({2, 3}, {2}))}));
  EXPECT_EQ(ExpectHostMatches(cases, {0, 0}), 12);
}

TEST(CodegenHost, SoftmaxLayerNormReductions) {
  std::vector<Case> cases;
  for (int64_t axis : {-1, 1}) {
    for (const char* op : {"Softmax", "LogSoftmax"}) {
      Case& c = cases.emplace_back();
      c.b.Output(c.b.Op(op, {c.In("x", Floats({3, 70, 5}, 50, -3, 3, false))}, {{"axis", Attribute::Int(axis)}}));
    }
  }
  Case& sn = cases.emplace_back();  // NaN and inf rows, as the reference computes them
  sn.b.Output(sn.b.Op("Softmax", {sn.In("x", Floats({4, 6}, 51))}));
  Case& ln = cases.emplace_back();
  std::vector<Value*> lo = ln.b.OpN("LayerNormalization", {ln.In("x", Floats({2, 3, 300}, 52, -3, 3, false)),
                                    ln.In("s", Floats({300}, 53, -3, 3, false)), ln.In("b", Floats({300}, 54, -3, 3, false))},
                                    3, {{"epsilon", Attribute::Float(1e-3f)}});
  for (Value* v : lo) ln.b.Output(v);
  const char* reduce[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                          "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"};
  for (const char* op : reduce) {
    Case& c = cases.emplace_back();
    c.b.Output(c.b.Op(op, {c.In("x", Floats({3, 4, 5}, 55, 0.5f, 2.f, false)), c.Const("a", Tensor::FromInt64({0, 2}, {2}))},
                      {{"keepdims", Attribute::Int(0)}}));
  }
  Case& rn = cases.emplace_back();  // NaN propagates through ReduceMax
  rn.b.Output(rn.b.Op("ReduceMax", {rn.In("x", Floats({4, 3}, 56)), rn.Const("a", Tensor::FromInt64({1}, {1}))}));
  Case& all = cases.emplace_back();  // no axes: everything
  all.b.Output(all.b.Op("ReduceSum", {all.In("x", Floats({600}, 57, -1, 1, false))}));
  Case& noop = cases.emplace_back();
  noop.b.Output(noop.b.Op("ReduceSumSquare", {noop.In("x", Floats({2, 3}, 58))}, {{"noop_with_empty_axes", Attribute::Int(1)}}));
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    Case& c = cases.emplace_back();
    c.b.Output(c.b.Op(op, {c.In("x", Floats({2, 3, 7, 7}, 59))}));
  }
  EXPECT_EQ(ExpectHostMatches(cases, {1e-5, 1e-5}), 21);
}

TEST(CodegenHost, Pools) {
  std::vector<Case> cases;
  auto pool = [&](const char* op, std::vector<int64_t> shape, std::map<std::string, Attribute> attrs) {
    Case& c = cases.emplace_back();
    c.b.Output(c.b.Op(op, {c.In("x", Floats(shape, 60))}, std::move(attrs)));
  };
  pool("MaxPool", {1, 2, 9, 9}, {{"kernel_shape", Attribute::Ints({3, 3})}, {"strides", Attribute::Ints({2, 2})},
                                 {"pads", Attribute::Ints({1, 1, 1, 1})}});
  pool("MaxPool", {1, 1, 8, 8}, {{"kernel_shape", Attribute::Ints({2, 2})}, {"dilations", Attribute::Ints({2, 2})},
                                 {"ceil_mode", Attribute::Int(1)}, {"strides", Attribute::Ints({2, 2})}});
  pool("AveragePool", {2, 3, 7, 6}, {{"kernel_shape", Attribute::Ints({3, 2})}, {"pads", Attribute::Ints({1, 0, 1, 1})}});
  pool("AveragePool", {1, 2, 7, 7}, {{"kernel_shape", Attribute::Ints({3, 3})}, {"pads", Attribute::Ints({1, 1, 1, 1})},
                                     {"count_include_pad", Attribute::Int(1)}, {"strides", Attribute::Ints({2, 2})},
                                     {"ceil_mode", Attribute::Int(1)}});
  pool("MaxPool", {1, 2, 10}, {{"kernel_shape", Attribute::Ints({3})}, {"auto_pad", Attribute::String("SAME_UPPER")}});
  pool("AveragePool", {1, 1, 4, 5, 6}, {{"kernel_shape", Attribute::Ints({2, 2, 3})}});
  EXPECT_EQ(ExpectHostMatches(cases), 6);
}

// A FusedConv's epilogue as a separate kernel over the plain convolution's output: bias,
// residual add and activations must equal the reference's FusedConv.
TEST(CodegenHost, EpilogueMatchesFusedConv) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 3, 6, 6});
  Value* w = b.Constant("w", Floats({4, 3, 3, 3}, 70, -1, 1, false));
  Value* bias = b.Constant("b", Floats({4}, 71, -1, 1, false));
  Value* res = b.Input("r", DType::kFloat32, {1, 4, 6, 6});
  Value* plain = b.Op("Conv", {x, w}, {{"pads", Attribute::Ints({1, 1, 1, 1})}});
  Value* fused = b.Op(kiln_ops::kFusedConv, {x, w, bias, res},
                      {{"pads", Attribute::Ints({1, 1, 1, 1})}, {"epilogue", Attribute::Strings({"Add", "Clip", "SiLU"})},
                       {"epilogue_alpha", Attribute::Floats({0, -0.5f, 0})}, {"epilogue_beta", Attribute::Floats({0, 2.f, 0})}},
                      kKilnDomain);
  b.Output(plain);
  b.Output(fused);
  std::unique_ptr<Graph> g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  ref::TensorMap feeds{{"x", Floats({1, 3, 6, 6}, 72)}, {"r", Floats({1, 4, 6, 6}, 73)}};
  absl::StatusOr<ref::TensorMap> want = ref::Run(*g, feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  const Node& node = *g->nodes()[1];
  codegen::EpilogueSpec spec{{1, 4, 6, 6}, 2, {4, 1, 1}, 1.f, kiln_ops::ReadEpilogue(node), {3}, {{1, 4, 6, 6}}};
  absl::StatusOr<codegen::Kernel> k = codegen::EmitEpilogue(spec, "epi");
  ASSERT_TRUE(k.ok()) << k.status();
  absl::StatusOr<std::unique_ptr<testing::HostModule>> m = testing::HostModule::Compile({*k}, testing::HostKernelDir());
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<Tensor> outs{want->at(plain->name).Clone()};
  std::vector<const Tensor*> ins{&feeds["x"], &*w->constant, &*bias->constant, &feeds["r"]};
  ASSERT_TRUE(testing::RunNodeKernels(**m, {*k}, node, ins, outs).ok());
  const check::Divergence d = check::CompareTensors(outs[0], want->at(fused->name), {1e-5, 1e-5});
  EXPECT_TRUE(d.ok) << d.message;
}

TEST(CodegenHost, RefusesWhatItDoesNotHandle) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3});
  Value* h = b.Input("h", DType::kFloat16, {2, 3});
  Value* s = b.Input("s", DType::kFloat32, {Dim::Symbol("batch"), 3});
  Value* starts = b.Input("starts", DType::kInt64, {1});
  b.Output(b.Op("MatMul", {x, b.Input("w", DType::kFloat32, {3, 2})}));
  b.Output(b.Op("Sqrt", {h}));
  b.Output(b.Op("Relu", {s}));
  b.Output(b.Op("Slice", {x, starts, b.Constant("e", Tensor::FromInt64({2}, {1}))}));
  b.Output(b.Op("Div", {b.Input("i", DType::kInt32, {2}), b.Input("j", DType::kInt32, {2})}));
  std::unique_ptr<Graph> g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  const auto& n = g->nodes();
  n[3]->output(0)->shape = Shape{1, 3};  // as if known: the starts are still not constant
  EXPECT_FALSE(codegen::HasGenerator(*n[0]));
  EXPECT_TRUE(absl::IsUnimplemented(EmitNodeKernels(*n[0], "k0").status()));
  EXPECT_TRUE(absl::IsUnimplemented(EmitNodeKernels(*n[1], "k1").status()));  // float16 math
  EXPECT_TRUE(absl::IsInvalidArgument(EmitNodeKernels(*n[2], "k2").status()));  // symbolic dim
  EXPECT_TRUE(absl::IsUnimplemented(EmitNodeKernels(*n[3], "k3").status()));   // runtime starts
  EXPECT_TRUE(absl::IsUnimplemented(EmitNodeKernels(*n[4], "k4").status()));   // integer division
}

TEST(CodegenHost, ShimReportsThreadsThatSkipABarrier) {
  codegen::Kernel k;
  k.name = "skips_barrier";
  k.block = 32;
  k.uses_barrier = true;
  k.params = {{codegen::KernelParam::Kind::kOutput, 0}};
  k.param_types = {"float"};
  k.source =
      "extern \"C\" __global__ void skips_barrier(float* p0) {\n"
      "  if (threadIdx.x == 0) return;\n  __syncthreads();\n  p0[threadIdx.x] = 1.f;\n}\n";
  absl::StatusOr<std::unique_ptr<testing::HostModule>> m = testing::HostModule::Compile({k}, testing::HostKernelDir());
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<float> out(32);
  EXPECT_FALSE((*m)->Launch(k, {out.data()}).ok());
}

TEST(IndexSpace, BroadcastStridesAndCoalesce) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(*codegen::BroadcastStrides({3, 1}, {2, 3, 4}), (V{0, 1, 0}));
  EXPECT_EQ(*codegen::BroadcastStrides({}, {2, 3}), (V{0, 0}));
  EXPECT_FALSE(codegen::BroadcastStrides({3}, {4}).has_value());
  EXPECT_FALSE(codegen::BroadcastStrides({1, 2, 3}, {2, 3}).has_value());
  // Two contiguous operands over [2, 3, 4] merge into one dim of 24.
  codegen::IndexSpace s{{2, 3, 4}, {{12, 4, 1}, {12, 4, 1}}, {0, 0}};
  codegen::IndexSpace c = codegen::Coalesce(s);
  EXPECT_EQ(c.dims, (V{24}));
  EXPECT_TRUE(codegen::IsLinear(c, 0));
  // A row broadcast over [2, 3, 4] with a [4] operand: [6, 4] with strides (0, 1).
  codegen::IndexSpace b = codegen::Coalesce({{2, 3, 4}, {{12, 4, 1}, {0, 0, 1}}, {0, 0}});
  EXPECT_EQ(b.dims, (V{6, 4}));
  EXPECT_EQ(b.strides[1], (V{0, 1}));
  EXPECT_EQ(codegen::IndexType(b), "int");
  EXPECT_EQ(codegen::IndexType({{int64_t{1} << 32}, {{1}}, {0}}), "long long");
}

TEST(CodegenLiterals, FloatLiteralsAreExact) {
  EXPECT_EQ(codegen::FloatLiteral(kInf), "kiln_bits(0x7f800000u)");
  EXPECT_EQ(codegen::FloatLiteral(-kInf), "kiln_bits(0xff800000u)");
  EXPECT_EQ(codegen::FloatLiteral(0.5f), "(0x1p-1f)");
  EXPECT_EQ(codegen::Identifier("9a.b-c"), "k_9a_b_c");
}

}  // namespace
}  // namespace kiln
