// The cuDNN and cuBLASLt call parameters, derived by pure planning functions: dims, pads,
// the row-major to column-major mapping, batch strides, and which epilogue steps the library
// call fuses. Each split is also checked numerically: the library's part simulated on the
// host (reference Conv / MatMul, then what cuDNN's fused call or cuBLASLt's epilogue adds),
// the rest through the generated epilogue kernel compiled for the host, against the
// reference's ai.kiln FusedConv / FusedMatMul.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "compiler/compile.h"
#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ir/kiln_ops.h"
#include "ops/interpreter.h"
#include "runtime/check/compare.h"
#include "runtime/cuda/arena_layout.h"
#include "runtime/cuda/conv_plan.h"
#include "runtime/cuda/matmul_plan.h"
#include "runtime/cuda/node_plan.h"
#include "tests/cuda/host_kernels.h"

namespace kiln::cuda {
namespace {

using V = std::vector<int64_t>;

Tensor Random(V shape, uint32_t seed) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
  return t;
}

Attribute Steps(std::vector<std::string> ops) { return Attribute::Strings(std::move(ops)); }

// A FusedConv over x [1, 4, 6, 6] with 3x3 weights, bias and residuals `res` of the given shapes.
struct ConvCase {
  GraphBuilder b;
  Value* y = nullptr;
  std::unique_ptr<Graph> g;
  ConvCase(std::vector<std::string> epilogue, std::vector<V> res, std::map<std::string, Attribute> extra = {}) {
    Value* x = b.Input("x", DType::kFloat32, {1, 4, 6, 6});
    std::vector<Value*> ins = {x, b.Constant("w", Random({5, 4, 3, 3}, 1)), b.Constant("b", Random({5}, 2))};
    for (size_t i = 0; i < res.size(); ++i) ins.push_back(b.Input("r" + std::to_string(i), DType::kFloat32, ToShape(res[i])));
    std::map<std::string, Attribute> attrs = {{"pads", Attribute::Ints({1, 1, 1, 1})}, {"epilogue", Steps(epilogue)},
                                              {"epilogue_alpha", Attribute::Floats(std::vector<float>(epilogue.size(), 0.f))},
                                              {"epilogue_beta", Attribute::Floats(std::vector<float>(epilogue.size(), 6.f))}};
    for (auto& [k, v] : extra) attrs[k] = v;
    y = b.Op(kiln_ops::kFusedConv, ins, attrs, kKilnDomain);
    b.Output(y);
    g = b.Build();
    EXPECT_TRUE(shape::InferShapes(*g).ok());
  }
  const Node& node() const { return *g->nodes()[0]; }
};

TEST(ConvPlan, FusesReluAndTheFirstResidualIntoCudnnsCall) {
  ConvCase relu({"Relu"}, {});
  absl::StatusOr<ConvPlan> p = PlanConv(relu.node());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->fused);
  EXPECT_EQ(p->bias_input, 2);
  EXPECT_EQ(p->z_input, -1);
  EXPECT_FALSE(p->has_epilogue);
  EXPECT_EQ(p->x_dims, (V{1, 4, 6, 6}));
  EXPECT_EQ(p->w_dims, (V{5, 4, 3, 3}));
  EXPECT_EQ(p->pads, (V{1, 1}));

  ConvCase residual({"Add", "Relu"}, {{1, 5, 6, 6}});
  p = PlanConv(residual.node());
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->fused);
  EXPECT_EQ(p->z_input, 3);
  EXPECT_FALSE(p->has_epilogue);
}

TEST(ConvPlan, LeavesTheRestToTheEpilogueKernel) {
  ConvCase clip({"Clip"}, {});  // ReLU6: not cuDNN's activation
  absl::StatusOr<ConvPlan> p = PlanConv(clip.node());
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->fused);
  EXPECT_EQ(p->epilogue.bias_input, 2);
  EXPECT_EQ(p->epilogue.bias_shape, (V{5, 1, 1}));
  ASSERT_EQ(p->epilogue.steps.size(), 1u);

  ConvCase after({"Relu", "Add"}, {{1, 5, 6, 6}});
  p = PlanConv(after.node());
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->fused);
  EXPECT_EQ(p->z_input, -1);
  EXPECT_EQ(p->epilogue.residual_inputs, (std::vector<int>{3}));

  ConvCase broadcast({"Add", "Relu"}, {{1, 5, 1, 1}});  // cuDNN's z cannot broadcast
  p = PlanConv(broadcast.node());
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->fused);
  EXPECT_EQ(p->epilogue.steps.size(), 2u);

  p = PlanConv(ConvCase({"Relu"}, {}).node(), {.fuse_relu = false});
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->fused);
}

TEST(ConvPlan, OneDimensionalConvolutionsGainAUnitHeight) {
  GraphBuilder b;
  Value* y = b.Op("Conv", {b.Input("x", DType::kFloat32, {2, 3, 10}), b.Constant("w", Random({4, 3, 3}, 3))},
                  {{"strides", Attribute::Ints({2})}, {"pads", Attribute::Ints({1, 1})}});
  b.Output(y);
  std::unique_ptr<Graph> g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  absl::StatusOr<ConvPlan> p = PlanConv(*g->nodes()[0]);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->x_dims, (V{2, 3, 1, 10}));
  EXPECT_EQ(p->y_dims, (V{2, 4, 1, 5}));
  EXPECT_EQ(p->pads, (V{0, 1}));
  EXPECT_EQ(p->strides, (V{1, 2}));
  EXPECT_FALSE(p->has_epilogue);
}

TEST(ConvPlan, RefusesWhatCudnnsPathDoesNotTake) {
  ConvCase asym({"Relu"}, {}, {{"pads", Attribute::Ints({1, 1, 0, 0})}});  // begin 1, end 0
  EXPECT_TRUE(absl::IsUnimplemented(PlanConv(asym.node()).status()));
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 4, 5, 5});
  b.Output(b.Op("Conv", {x, b.Input("w", DType::kFloat32, {2, 4, 1, 1})}));  // runtime weights
  b.Output(b.Op("Relu", {x}));
  std::unique_ptr<Graph> g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  EXPECT_TRUE(absl::IsUnimplemented(PlanConv(*g->nodes()[0]).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(PlanConv(*g->nodes()[1]).status()));
  // Channels that the groups do not divide (shapes set by hand: inference rejects it too).
  GraphBuilder bad;
  Value* y = bad.Op("Conv", {bad.Input("x", DType::kFloat32, {1, 4, 5, 5}), bad.Constant("w", Random({2, 3, 1, 1}, 4))},
                    {{"group", Attribute::Int(2)}});
  y->dtype = DType::kFloat32;
  y->shape = Shape{1, 2, 5, 5};
  bad.Output(y);
  std::unique_ptr<Graph> gb = bad.Build();
  EXPECT_TRUE(absl::IsInvalidArgument(PlanConv(*gb->nodes()[0]).status()));
}

// A product node over graph inputs a, b (and c), with attributes.
struct MatmulCase {
  std::unique_ptr<Graph> g;
  MatmulCase(const std::string& op, V a, V b, std::optional<V> c, std::map<std::string, Attribute> attrs = {},
             const std::string& domain = "") {
    GraphBuilder gb;
    std::vector<Value*> ins = {gb.Input("a", DType::kFloat32, ToShape(a)), gb.Input("b", DType::kFloat32, ToShape(b))};
    if (c) ins.push_back(gb.Input("c", DType::kFloat32, ToShape(*c)));
    gb.Output(gb.Op(op, ins, std::move(attrs), domain));
    g = gb.Build();
    EXPECT_TRUE(shape::InferShapes(*g).ok());
  }
  absl::StatusOr<MatmulPlan> Plan(MatmulPlanOptions o = {}) const { return PlanMatmul(*g->nodes()[0], o); }
};

TEST(MatmulPlan, MapsRowMajorGemmToColumnMajorCublasLt) {
  // Y[3, 5] = A[3, 4] @ B^T, B stored [5, 4]; bias C[5].
  absl::StatusOr<MatmulPlan> p = MatmulCase("Gemm", {3, 4}, {5, 4}, V{5}, {{"transB", Attribute::Int(1)}}).Plan();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->m, 3);
  EXPECT_EQ(p->n, 5);
  EXPECT_EQ(p->k, 4);
  // cuBLASLt's A is B as stored (column-major 4 x 5, ld 4), transposed to 5 x 4.
  EXPECT_EQ(p->lt_a.rows, 4);
  EXPECT_EQ(p->lt_a.cols, 5);
  EXPECT_EQ(p->lt_a.ld, 4);
  EXPECT_TRUE(p->lt_a.transpose);
  // Its B is A as stored (column-major 4 x 3), and D is Y^T (5 x 3, ld 5).
  EXPECT_EQ(p->lt_b.rows, 4);
  EXPECT_EQ(p->lt_b.cols, 3);
  EXPECT_FALSE(p->lt_b.transpose);
  EXPECT_EQ(p->lt_d.rows, 5);
  EXPECT_EQ(p->lt_d.ld, 5);
  EXPECT_EQ(p->epilogue, MatmulPlan::Epilogue::kBias);
  EXPECT_EQ(p->bias_input, 2);
  EXPECT_EQ(p->c_input, -1);
  EXPECT_EQ(p->beta, 0.f);  // C is D here: a non-zero beta would add the previous output
  EXPECT_FALSE(p->has_epilogue);
}

// cuBLASLt reads C whenever beta is not 0, and a plan without a C passes D as C: every plan
// must then have beta 0, whatever its C became (bias epilogue, tail, none).
TEST(MatmulPlan, NeverLeavesBetaOnAnAliasedC) {
  const std::vector<std::pair<std::optional<V>, float>> cs = {
      {V{5}, 1.f}, {V{1, 5}, 1.f}, {V{5}, 0.5f}, {V{3, 1}, 1.f}, {V{3, 5}, 2.f}, {std::nullopt, 1.f}};
  for (const auto& [c, beta] : cs) {
    absl::StatusOr<MatmulPlan> p = MatmulCase("Gemm", {3, 4}, {4, 5}, c, {{"beta", Attribute::Float(beta)}}).Plan();
    ASSERT_TRUE(p.ok()) << p.status();
    if (p->c_input < 0) {
      EXPECT_EQ(p->beta, 0.f) << "C " << (c ? c->size() : 0) << " beta " << beta;
    } else {
      EXPECT_EQ(p->beta, beta);  // a full-shape C of its own keeps Gemm's beta
    }
  }
}

TEST(MatmulPlan, StatesTheAlignmentCublasLtMayAssume) {
  EXPECT_EQ(LtAlignment(0x7f0000000000, 0, 1), 256u);  // cudaMalloc's own alignment
  EXPECT_EQ(LtAlignment(0x7f0000000040, 0, 1), 64u);   // an arena offset: not 256, cuBLASLt's default
  EXPECT_EQ(LtAlignment(0x7f0000000100, 20, 6), 16u);   // batch matrices 80 bytes apart
  EXPECT_EQ(LtAlignment(0x7f0000000100, 20, 1), 256u);  // one matrix: the stride is never used
  EXPECT_EQ(LtAlignment(0x7f0000000004, 64, 2), 4u);    // a float, never less
}

TEST(MatmulPlan, PlacesCAsBiasAsCublasCOrInTheTail) {
  absl::StatusOr<MatmulPlan> full = MatmulCase("Gemm", {3, 4}, {4, 5}, V{3, 5}, {{"beta", Attribute::Float(0.5f)}}).Plan();
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->c_input, 2);
  EXPECT_EQ(full->beta, 0.5f);
  absl::StatusOr<MatmulPlan> scaled = MatmulCase("Gemm", {3, 4}, {4, 5}, V{5}, {{"beta", Attribute::Float(0.5f)}}).Plan();
  ASSERT_TRUE(scaled.ok());
  EXPECT_EQ(scaled->bias_input, -1);
  EXPECT_EQ(scaled->tail.bias_input, 2);
  EXPECT_EQ(scaled->tail.bias_scale, 0.5f);
  EXPECT_EQ(scaled->beta, 0.f);
  absl::StatusOr<MatmulPlan> column = MatmulCase("Gemm", {3, 4}, {4, 5}, V{3, 1}).Plan();
  ASSERT_TRUE(column.ok());
  EXPECT_EQ(column->tail.bias_input, 2);
}

TEST(MatmulPlan, FusesReluAndTanhGeluOnly) {
  auto fused = [](std::vector<std::string> steps) {
    return MatmulCase(kiln_ops::kFusedMatMul, {8, 16}, {16, 4}, V{4},
                      {{"epilogue", Steps(steps)}, {"epilogue_alpha", Attribute::Floats(std::vector<float>(steps.size()))},
                       {"epilogue_beta", Attribute::Floats(std::vector<float>(steps.size()))}},
                      kKilnDomain).Plan();
  };
  EXPECT_EQ(fused({"Relu"})->epilogue, MatmulPlan::Epilogue::kReluBias);
  EXPECT_EQ(fused({"GeluTanh"})->epilogue, MatmulPlan::Epilogue::kGeluBias);
  // cuBLASLt's GELU is the tanh form: the erf form stays in the generated tail.
  absl::StatusOr<MatmulPlan> erf = fused({"Gelu"});
  EXPECT_EQ(erf->epilogue, MatmulPlan::Epilogue::kBias);
  ASSERT_EQ(erf->tail.steps.size(), 1u);
  EXPECT_EQ(erf->tail.steps[0].op, "Gelu");
  EXPECT_FALSE(MatmulCase(kiln_ops::kFusedMatMul, {8, 16}, {16, 4}, V{4},
                          {{"epilogue", Steps({"Relu"})}, {"epilogue_alpha", Attribute::Floats({0})},
                           {"epilogue_beta", Attribute::Floats({0})}}, kKilnDomain)
                   .Plan({.fuse_activation = false})->epilogue == MatmulPlan::Epilogue::kReluBias);
}

TEST(MatmulPlan, BatchesWithStridesAndSharedOperands) {
  absl::StatusOr<MatmulPlan> both = MatmulCase("MatMul", {2, 3, 4, 5}, {2, 3, 5, 6}, std::nullopt).Plan();
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->batch, 6);
  EXPECT_EQ(both->lt_b.batch_stride, 20);  // our A
  EXPECT_EQ(both->lt_a.batch_stride, 30);  // our B
  EXPECT_EQ(both->lt_d.batch_stride, 24);
  absl::StatusOr<MatmulPlan> shared = MatmulCase("MatMul", {2, 3, 4, 5}, {5, 6}, std::nullopt).Plan();
  ASSERT_TRUE(shared.ok());
  EXPECT_EQ(shared->lt_a.batch_stride, 0);
  absl::StatusOr<MatmulPlan> vec = MatmulCase("MatMul", {5}, {5, 6}, std::nullopt).Plan();
  ASSERT_TRUE(vec.ok());
  EXPECT_EQ(vec->m, 1);
  EXPECT_TRUE(absl::IsUnimplemented(MatmulCase("MatMul", {2, 1, 4, 5}, {1, 3, 5, 6}, std::nullopt).Plan().status()));
  EXPECT_TRUE(absl::IsUnimplemented(MatmulCase("MatMul", {0, 5}, {5, 6}, std::nullopt).Plan().status()));
}

TEST(NodePlan, ChoosesViewsLibrariesKernelsAndFallbacks) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 6});
  Value* r = b.Op("Reshape", {x, b.Constant("s", Tensor::FromInt64({3, 4}, {2}))});
  Value* s = b.Op("Softmax", {r});
  Value* m = b.Op("MatMul", {s, b.Constant("w", Random({4, 2}, 5))});
  Value* nz = b.Op("NonZero", {m});
  b.Output(nz);
  std::unique_ptr<Graph> g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  std::vector<NodeKind> kinds;
  for (const auto& n : g->nodes()) {
    absl::StatusOr<NodePlan> p = PlanNode(*n, "k");
    ASSERT_TRUE(p.ok()) << p.status();
    kinds.push_back(p->kind);
    if (p->kind == NodeKind::kFallback) {
      EXPECT_FALSE(p->reason.empty());
    }
    if (p->kind == NodeKind::kGenerated) {
      EXPECT_EQ(p->kernels.size(), 1u);
    }
  }
  EXPECT_EQ(kinds, (std::vector<NodeKind>{NodeKind::kView, NodeKind::kGenerated, NodeKind::kMatmul, NodeKind::kFallback}));
}

// When cuDNN refuses the fused call, the engine runs the node's plain alternative: the
// convolution unfused plus one generated kernel for bias and activation, under its own names.
TEST(NodePlan, AFusedConvHasAPlainAlternativeWithItsEpilogueKernel) {
  ConvCase relu({"Relu"}, {});
  absl::StatusOr<NodePlan> fused = PlanNode(relu.node(), "n0_FusedConv");
  absl::StatusOr<NodePlan> plain = PlanNode(relu.node(), "n0_FusedConv_plain", {.fuse_activations = false});
  ASSERT_TRUE(fused.ok() && plain.ok());
  EXPECT_TRUE(fused->conv.fused);
  EXPECT_TRUE(fused->kernels.empty());  // negative case: the fused call needs no kernel
  ASSERT_EQ(plain->kind, NodeKind::kConv);
  EXPECT_FALSE(plain->conv.fused);
  ASSERT_EQ(plain->kernels.size(), 1u);
  EXPECT_EQ(plain->kernels[0].name.rfind("n0_FusedConv_plain", 0), 0u) << plain->kernels[0].name;
}

TEST(ArenaLayout, PlacesPlannedValuesIoWeightsAndViews) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 6});
  Value* r = b.Op("Relu", {x});
  Value* v = b.Op("Reshape", {r, b.Constant("s", Tensor::FromInt64({3, 4}, {2}))});  // a planned view
  Value* table = b.Constant("t", Random({12}, 6));
  Value* tv = b.Op("Reshape", {table, b.Constant("s2", Tensor::FromInt64({3, 4}, {2}))});  // a view of a constant
  Value* y = b.Op("Softmax", {b.Op("Add", {v, tv})});
  b.Output(y);
  b.Output(x);                                         // an input that is also an output
  b.Output(b.Constant("c", Tensor::FromFloat({1, 2}, {2})));  // a constant output
  b.Output(b.Op("Neg", {b.Op("Flatten", {x}, {{"axis", Attribute::Int(0)}})}));  // a view of an input
  std::unique_ptr<Graph> g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g, {.max_fold_elements = 0, .allow_unknown_ops = true}).ok());
  absl::StatusOr<CompiledGraph> c = CompileGraph(*g, {});
  ASSERT_TRUE(c.ok()) << c.status();
  const Graph& cg = *c->graph;
  std::vector<const Value*> device_constants;
  for (const auto& n : cg.nodes()) {
    for (const Value* in : n->inputs) {
      if (in && in->is_constant()) device_constants.push_back(in);
    }
  }
  absl::StatusOr<ArenaLayout> l = LayOutArena(cg, c->plan, device_constants);
  ASSERT_TRUE(l.ok()) << l.status();
  auto at = [&](const std::string& name) { return l->at.at(name); };
  EXPECT_EQ(at("x").region, Region::kIo);
  EXPECT_EQ(at(y->name).region, Region::kIo);  // graph outputs are not planned
  EXPECT_NE(at("x").offset, at(y->name).offset);
  EXPECT_EQ(at(y->name).offset % kDeviceAlign, 0);
  // The planned view shares its source's bytes; a view of an input is the input.
  int views = 0, external = 0;
  for (const plan::ValuePlan& vp : c->plan.values) {
    views += vp.alias == plan::AliasKind::kView;
    external += vp.external;
    const Placement p = at(vp.name);
    if (vp.external) {
      EXPECT_EQ(p.region, at(vp.root).region) << vp.name;
      EXPECT_EQ(p.offset, at(vp.root).offset) << vp.name;
    } else {
      EXPECT_EQ(p.region, Region::kArena) << vp.name;
      EXPECT_EQ(p.offset, vp.offset) << vp.name;
    }
  }
  EXPECT_GE(views, 1);
  EXPECT_EQ(external, 1);
  ASSERT_EQ(l->outputs.size(), 4u);
  EXPECT_EQ(l->outputs[1].region, Region::kIo);  // x: drained from its input buffer
  EXPECT_EQ(l->outputs[1].offset, at("x").offset);
  EXPECT_EQ(l->outputs[2].region, Region::kWeights);  // the constant output is uploaded
  EXPECT_EQ(l->output_bytes[0], 12 * 4);
  EXPECT_EQ(l->input_bytes, (std::vector<int64_t>{12 * 4}));
  EXPECT_GE(l->weight_bytes, 2 * kDeviceAlign);
}

// --- the splits, numerically -------------------------------------------------------------

// What cuDNN's fused call computes: relu(conv + bias + z).
void FusedCallOnHost(const ConvPlan& p, const Tensor& bias, const Tensor* z, Tensor& y) {
  const int64_t c = p.y_dims[1], plane = y.numel() / p.y_dims[0] / c;
  float* v = y.mutable_data<float>();
  for (int64_t i = 0; i < y.numel(); ++i) {
    float s = v[i] + bias.data<float>()[(i / plane) % c] + (z ? z->data<float>()[i] : 0.f);
    v[i] = s < 0.f ? 0.f : s;
  }
}

void ExpectConvSplitMatches(ConvCase& cc, std::vector<V> res) {
  ref::TensorMap feeds{{"x", Random({1, 4, 6, 6}, 10)}};
  for (size_t i = 0; i < res.size(); ++i) feeds["r" + std::to_string(i)] = Random(res[i], 11 + static_cast<uint32_t>(i));
  absl::StatusOr<ref::TensorMap> want = ref::Run(*cc.g, feeds);
  ASSERT_TRUE(want.ok()) << want.status();
  const Node& node = cc.node();
  absl::StatusOr<ConvPlan> p = PlanConv(node);
  ASSERT_TRUE(p.ok());
  // The library's part: the plain convolution, then the fused call's additions.
  Node plain = node;
  plain.domain = "";
  plain.op_type = "Conv";
  plain.inputs.resize(2);
  for (const char* a : {"epilogue", "epilogue_alpha", "epilogue_beta"}) plain.attrs.erase(a);
  std::vector<const Tensor*> ins = {&feeds["x"], &*node.input(1)->constant, &*node.input(2)->constant};
  for (size_t i = 0; i < res.size(); ++i) ins.push_back(&feeds["r" + std::to_string(i)]);
  absl::StatusOr<std::vector<Tensor>> conv = ref::RunNode(plain, {ins[0], ins[1]});
  ASSERT_TRUE(conv.ok()) << conv.status();
  std::vector<Tensor> y = {(*conv)[0]};
  if (p->fused) FusedCallOnHost(*p, *ins[2], p->z_input >= 0 ? ins[p->z_input] : nullptr, y[0]);
  if (p->has_epilogue) {
    absl::StatusOr<codegen::Kernel> k = codegen::EmitEpilogue(p->epilogue, "conv_tail");
    ASSERT_TRUE(k.ok()) << k.status();
    auto m = testing::HostModule::Compile({*k}, testing::HostKernelDir());
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE(testing::RunNodeKernels(**m, {*k}, node, ins, y).ok());
  }
  const check::Divergence d = check::CompareTensors(y[0], want->at(cc.y->name), {1e-5, 1e-5});
  EXPECT_TRUE(d.ok) << d.message;
}

TEST(ConvPlan, SplitsComputeWhatFusedConvComputes) {
  const std::vector<std::pair<std::vector<std::string>, std::vector<V>>> cases = {
      {{"Relu"}, {}}, {{"Add", "Relu"}, {{1, 5, 6, 6}}}, {{"Relu", "Add"}, {{1, 5, 6, 6}}},
      {{"Clip"}, {}}, {{"Add", "Relu"}, {{1, 5, 1, 1}}}, {{"Add", "Relu", "Add"}, {{1, 5, 6, 6}, {1, 5, 6, 6}}}};
  for (const auto& [steps, res] : cases) {
    SCOPED_TRACE(steps.size());
    ConvCase cc(steps, res);
    ExpectConvSplitMatches(cc, res);
  }
}

// What cuBLASLt computes for a 2-D plan, as its documentation states it (not as our plan
// assumes): D = act(alpha * op(A) op(B) + beta * C + bias). C is the node's full-shape C, or,
// when the plan has none (c_input < 0), D itself: MakeMatmulStep passes D as C, and C may
// alias D. So beta * C adds D's previous contents (`stale`, the last run's output) whenever
// beta is not 0; C is not read when beta is 0. The bias epilogue adds bias[row of D], our column.
Tensor CublasLtOnHost(const MatmulPlan& p, const Node& node, const std::vector<const Tensor*>& ins, const Tensor& stale) {
  Tensor y(DType::kFloat32, {p.m, p.n});
  const bool ta = node.GetInt("transA", 0) != 0, tb = node.GetInt("transB", 0) != 0;
  const float* a = ins[0]->data<float>();
  const float* b = ins[1]->data<float>();
  const float* c = p.c_input >= 0 ? ins[p.c_input]->data<float>() : stale.data<float>();
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < p.k; ++k) acc += double(a[ta ? k * p.m + i : i * p.k + k]) * b[tb ? j * p.k + k : k * p.n + j];
      float v = p.alpha * static_cast<float>(acc);
      if (p.beta != 0.f) v += p.beta * c[i * p.n + j];
      if (p.bias_input >= 0) v += ins[p.bias_input]->data<float>()[j];
      if (p.epilogue == MatmulPlan::Epilogue::kRelu || p.epilogue == MatmulPlan::Epilogue::kReluBias) v = v < 0.f ? 0.f : v;
      if (p.epilogue == MatmulPlan::Epilogue::kGelu || p.epilogue == MatmulPlan::Epilogue::kGeluBias) {
        v = 0.5f * v * (1.f + std::tanh(0.79788456f * (v + 0.044715f * v * v * v)));
      }
      y.mutable_data<float>()[i * p.n + j] = v;
    }
  }
  return y;
}

TEST(MatmulPlan, SplitsComputeWhatFusedMatMulComputes) {
  struct Case {
    std::vector<std::string> steps;
    V c;
    float beta;
    int trans_b;
  };
  const std::vector<Case> cases = {{{"Relu"}, {6}, 1.f, 0},      {{"GeluTanh"}, {6}, 1.f, 1}, {{"Gelu"}, {6}, 1.f, 0},
                                   {{"Relu"}, {6}, 0.5f, 0},     {{"Sigmoid"}, {4, 6}, 2.f, 1}, {{"Add", "Relu"}, {1, 6}, 1.f, 0},
                                   {{"Tanh"}, {4, 1}, 1.f, 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.steps[0] + " beta " + std::to_string(c.beta));
    GraphBuilder b;
    std::vector<Value*> ins = {b.Input("a", DType::kFloat32, {4, 5}),
                               b.Input("b", DType::kFloat32, c.trans_b ? Shape{6, 5} : Shape{5, 6}),
                               b.Input("c", DType::kFloat32, ToShape(c.c))};
    if (c.steps[0] == "Add") {
      ins.push_back(b.Input("r", DType::kFloat32, {4, 6}));
    }
    Value* y = b.Op(kiln_ops::kFusedMatMul, ins,
                    {{"epilogue", Steps(c.steps)}, {"epilogue_alpha", Attribute::Floats(std::vector<float>(c.steps.size()))},
                     {"epilogue_beta", Attribute::Floats(std::vector<float>(c.steps.size()))},
                     {"alpha", Attribute::Float(0.75f)}, {"beta", Attribute::Float(c.beta)},
                     {"transB", Attribute::Int(c.trans_b)}},
                    kKilnDomain);
    b.Output(y);
    std::unique_ptr<Graph> g = b.Build();
    ASSERT_TRUE(shape::InferShapes(*g).ok());
    ref::TensorMap feeds{{"a", Random({4, 5}, 20)}, {"b", Random(c.trans_b ? V{6, 5} : V{5, 6}, 21)}, {"c", Random(c.c, 22)},
                         {"r", Random({4, 6}, 23)}};
    if (ins.size() < 4) feeds.erase("r");
    absl::StatusOr<ref::TensorMap> want = ref::Run(*g, feeds);
    ASSERT_TRUE(want.ok()) << want.status();
    const Node& node = *g->nodes()[0];
    absl::StatusOr<MatmulPlan> p = PlanMatmul(node);
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<const Tensor*> args = {&feeds["a"], &feeds["b"], &feeds["c"]};
    if (feeds.count("r")) args.push_back(&feeds["r"]);
    // The output buffer still holds an earlier run's result when cuBLASLt runs.
    std::vector<Tensor> out = {CublasLtOnHost(*p, node, args, Random({4, 6}, 24))};
    if (p->has_epilogue) {
      absl::StatusOr<codegen::Kernel> k = codegen::EmitEpilogue(p->tail, "mm_tail");
      ASSERT_TRUE(k.ok()) << k.status();
      auto m = testing::HostModule::Compile({*k}, testing::HostKernelDir());
      ASSERT_TRUE(m.ok()) << m.status();
      ASSERT_TRUE(testing::RunNodeKernels(**m, {*k}, node, args, out).ok());
    }
    const check::Divergence d = check::CompareTensors(out[0], want->at(y->name), {1e-5, 1e-5});
    EXPECT_TRUE(d.ok) << d.message;
  }
}

}  // namespace
}  // namespace kiln::cuda
