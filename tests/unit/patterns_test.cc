// recognize_patterns tests: each pattern as exporters write it (structure: what it became;
// numbers: the reference interpreter before and after), and the negative cases where a
// swallowed value is still needed elsewhere or a constant is not the one the pattern needs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "compiler/passes/recognize_patterns.h"
#include "compiler/pipeline.h"
#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ir/kiln_ops.h"
#include "ir/verifier.h"
#include "ops/interpreter.h"
#include "tests/unit/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::CountOps;
using testing::FindOp;

// Pattern rewrites must not move any output by more than 1e-5.
bool RecognizeAndCompare(Graph& g, const ref::TensorMap& feeds) {
  return testing::RunPassAndCompare(g, RecognizePatterns, feeds, {1e-5, 0.0});
}

Tensor Ramp(std::vector<int64_t> shape, double scale, double offset) {
  Tensor t(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, 2.0 * std::sin(i * scale) + offset);
  return t;
}




Value* F(GraphBuilder& b, double v) { return b.Constant("c", Tensor::Scalar(DType::kFloat32, v)); }
Value* Axes(GraphBuilder& b, std::vector<int64_t> axes) {
  const int64_t n = static_cast<int64_t>(axes.size());
  return b.Constant("axes", Tensor::FromInt64(axes, {n}));
}

// ---- LayerNormalization -------------------------------------------------------------------

struct LayerNormOptions {
  std::vector<int64_t> axes = {-1};
  bool affine = true;
  bool mean_also_output = false;
  bool variance_also_output = false;
};

// PyTorch 1.13's opset-16 export of nn.LayerNorm(8) on x [2, 3, 8].
std::unique_ptr<Graph> LayerNormGraph(const LayerNormOptions& o) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3, 8});
  Value* mean = b.Op("ReduceMean", {x, Axes(b, o.axes)});
  Value* d = b.Op("Sub", {x, mean});
  Value* var = b.Op("ReduceMean", {b.Op("Pow", {d, F(b, 2.0)}), Axes(b, o.axes)});
  Value* y = b.Op("Div", {d, b.Op("Sqrt", {b.Op("Add", {var, F(b, 1e-5)})})});
  if (o.affine) {
    y = b.Op("Mul", {y, b.Constant("gamma", Ramp({8}, 0.9, 1.0))});
    y = b.Op("Add", {y, b.Constant("beta", Ramp({8}, 0.4, 0.0))});
  }
  b.Output(y);
  if (o.mean_also_output) b.Output(b.Op("Relu", {mean}));
  if (o.variance_also_output) b.Output(var);
  return b.Build();
}

const ref::TensorMap kLnFeeds = {{"x", Ramp({2, 3, 8}, 0.37, 0.5)}};

TEST(RecognizeLayerNorm, FusesPyTorchExportWithGammaAndBeta) {
  auto g = LayerNormGraph({});
  EXPECT_TRUE(RecognizeAndCompare(*g, kLnFeeds));
  ASSERT_EQ(g->nodes().size(), 1u);
  const Node& ln = *g->nodes()[0];
  EXPECT_EQ(ln.op_type, "LayerNormalization");
  EXPECT_EQ(ln.GetInt("axis", 0), -1);
  EXPECT_NEAR(ln.GetFloat("epsilon", 0), 1e-5, 1e-12);
  EXPECT_EQ(ln.input(1)->constant->shape(), (std::vector<int64_t>{8}));
  EXPECT_EQ(ln.input(0)->name, "x");
}

TEST(RecognizeLayerNorm, FusesTwoTrailingAxesWithoutAffineAndCreatesOnesAndZeros) {
  auto g = LayerNormGraph({.axes = {1, 2}, .affine = false});
  EXPECT_TRUE(RecognizeAndCompare(*g, kLnFeeds));
  ASSERT_EQ(g->nodes().size(), 1u);
  const Node& ln = *g->nodes()[0];
  EXPECT_EQ(ln.GetInt("axis", 0), -2);
  const Tensor& scale = *ln.input(1)->constant;
  const Tensor& bias = *ln.input(2)->constant;
  EXPECT_EQ(scale.shape(), (std::vector<int64_t>{3, 8}));
  EXPECT_EQ(scale.GetDouble(5), 1.0);
  EXPECT_EQ(bias.GetDouble(5), 0.0);
}

TEST(RecognizeLayerNorm, DoesNotFuseLayerNormWhenMeanHasAnotherConsumer) {
  auto g = LayerNormGraph({.mean_also_output = true});
  EXPECT_FALSE(RecognizeAndCompare(*g, kLnFeeds));
  EXPECT_EQ(CountOps(*g, "LayerNormalization"), 0);
  EXPECT_EQ(CountOps(*g, "ReduceMean"), 2);
}

TEST(RecognizeLayerNorm, DoesNotFuseWhenVarianceIsAGraphOutput) {
  auto g = LayerNormGraph({.variance_also_output = true});
  EXPECT_FALSE(RecognizeAndCompare(*g, kLnFeeds));
  EXPECT_EQ(CountOps(*g, "LayerNormalization"), 0);
}

TEST(RecognizeLayerNorm, DoesNotFuseReductionOverNonTrailingAxis) {
  auto g = LayerNormGraph({.axes = {1}});
  EXPECT_FALSE(RecognizeAndCompare(*g, kLnFeeds));
  EXPECT_EQ(CountOps(*g, "LayerNormalization"), 0);
}

TEST(RecognizeLayerNorm, LeavesGammaThatVariesAlongABatchAxisOutside) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3, 8});
  Value* mean = b.Op("ReduceMean", {x, Axes(b, {-1})});
  Value* d = b.Op("Sub", {x, mean});
  Value* var = b.Op("ReduceMean", {b.Op("Pow", {d, F(b, 2.0)}), Axes(b, {-1})});
  Value* y = b.Op("Div", {d, b.Op("Sqrt", {b.Op("Add", {var, F(b, 1e-5)})})});
  b.Output(b.Op("Mul", {y, b.Constant("gamma", Ramp({3, 1}, 0.9, 1.0))}));  // per row
  auto g = b.Build();
  EXPECT_TRUE(RecognizeAndCompare(*g, kLnFeeds));
  EXPECT_EQ(CountOps(*g, "LayerNormalization"), 1);
  EXPECT_EQ(CountOps(*g, "Mul"), 1);  // the per-row Mul stays outside
}

// ---- GELU ---------------------------------------------------------------------------------

enum class HalfAt { kLast, kFirst, kOnFactor };

// erf GELU on x [2, 5]; `inv_sqrt2_mul` writes x / sqrt(2) as x * 0.70710678.
std::unique_ptr<Graph> GeluErfGraph(HalfAt half, bool inv_sqrt2_mul, double sqrt2 = 1.4142135,
                                    bool erf_also_output = false) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 5});
  Value* u = inv_sqrt2_mul ? b.Op("Mul", {F(b, 1.0 / sqrt2), x}) : b.Op("Div", {x, F(b, sqrt2)});
  Value* e = b.Op("Erf", {u});
  Value* a = b.Op("Add", {F(b, 1.0), e});
  Value* y = nullptr;
  switch (half) {
    case HalfAt::kLast:
      y = b.Op("Mul", {b.Op("Mul", {x, a}), F(b, 0.5)});
      break;
    case HalfAt::kFirst:
      y = b.Op("Mul", {b.Op("Mul", {x, F(b, 0.5)}), a});
      break;
    case HalfAt::kOnFactor:
      y = b.Op("Mul", {b.Op("Mul", {a, F(b, 0.5)}), x});
      break;
  }
  b.Output(y);
  if (erf_also_output) b.Output(e);
  return b.Build();
}

const ref::TensorMap kGeluFeeds = {{"x", Ramp({2, 5}, 0.8, 0.0)}};

TEST(RecognizeGelu, FusesErfFormInEachOperandOrder) {
  for (HalfAt half : {HalfAt::kLast, HalfAt::kFirst, HalfAt::kOnFactor}) {
    for (bool mul : {false, true}) {
      auto g = GeluErfGraph(half, mul);
      EXPECT_TRUE(RecognizeAndCompare(*g, kGeluFeeds)) << static_cast<int>(half) << mul;
      ASSERT_EQ(g->nodes().size(), 1u);
      EXPECT_EQ(g->nodes()[0]->op_type, "Gelu");
      EXPECT_EQ(g->nodes()[0]->GetString("approximate", ""), "none");
      EXPECT_GE(g->nodes()[0]->opset, 20);
    }
  }
}

TEST(RecognizeGelu, DoesNotFuseErfFormWithWrongConstant) {
  auto g = GeluErfGraph(HalfAt::kLast, false, /*sqrt2=*/1.5);
  EXPECT_FALSE(RecognizeAndCompare(*g, kGeluFeeds));
  EXPECT_EQ(CountOps(*g, "Erf"), 1);
}

TEST(RecognizeGelu, DoesNotFuseWhenErfOutputHasAnotherConsumer) {
  auto g = GeluErfGraph(HalfAt::kLast, false, 1.4142135, /*erf_also_output=*/true);
  EXPECT_FALSE(RecognizeAndCompare(*g, kGeluFeeds));
  EXPECT_EQ(CountOps(*g, "Gelu"), 0);
}

// PyTorch's approximate='tanh' export: x^3 as x * (x * x), or Pow(x, 3) (Hugging Face).
std::unique_ptr<Graph> GeluTanhGraph(bool pow_cube, bool cube_also_output = false) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 5});
  Value* cube = pow_cube ? b.Op("Pow", {x, F(b, 3.0)}) : b.Op("Mul", {x, b.Op("Mul", {x, x})});
  Value* inner = b.Op("Add", {x, b.Op("Mul", {F(b, 0.044715), cube})});
  Value* t = b.Op("Tanh", {b.Op("Mul", {F(b, 0.7978845608), inner})});
  Value* factor = b.Op("Add", {F(b, 1.0), t});
  b.Output(b.Op("Mul", {F(b, 0.5), b.Op("Mul", {x, factor})}));
  if (cube_also_output) b.Output(cube);
  return b.Build();
}

TEST(RecognizeGelu, FusesTanhFormWithMulAndPowCube) {
  for (bool pow_cube : {false, true}) {
    auto g = GeluTanhGraph(pow_cube);
    EXPECT_TRUE(RecognizeAndCompare(*g, kGeluFeeds)) << pow_cube;
    ASSERT_EQ(g->nodes().size(), 1u);
    EXPECT_EQ(g->nodes()[0]->op_type, "Gelu");
    EXPECT_EQ(g->nodes()[0]->GetString("approximate", ""), "tanh");
  }
}

TEST(RecognizeGelu, DoesNotFuseTanhFormWhenCubeIsAGraphOutput) {
  auto g = GeluTanhGraph(false, /*cube_also_output=*/true);
  EXPECT_FALSE(RecognizeAndCompare(*g, kGeluFeeds));
  EXPECT_EQ(CountOps(*g, "Tanh"), 1);
}

// ---- HardSwish and SiLU -------------------------------------------------------------------

const ref::TensorMap kActFeeds = {{"x", Ramp({2, 6}, 0.9, 0.0)}};  // spans (-6, 6)

TEST(RecognizeHardSwish, FusesXTimesHardSigmoid) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 6});
  Value* hs = b.Op("HardSigmoid", {x}, {{"alpha", Attribute::Float(1.0f / 6.0f)}});
  b.Output(b.Op("Mul", {hs, x}));
  auto g = b.Build();
  EXPECT_TRUE(RecognizeAndCompare(*g, kActFeeds));
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->op_type, "HardSwish");
}

TEST(RecognizeHardSwish, DoesNotFuseHardSigmoidWithDefaultAlpha) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 6});
  b.Output(b.Op("Mul", {x, b.Op("HardSigmoid", {x})}));  // alpha 0.2: not hard-swish
  auto g = b.Build();
  EXPECT_FALSE(RecognizeAndCompare(*g, kActFeeds));
  EXPECT_EQ(CountOps(*g, "HardSigmoid"), 1);
}

std::unique_ptr<Graph> Relu6HardSwish(bool divide_first, double hi = 6.0) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 6});
  Value* r = b.Op("Clip", {b.Op("Add", {x, F(b, 3.0)}), F(b, 0.0), F(b, hi)});
  if (divide_first) {
    b.Output(b.Op("Mul", {x, b.Op("Mul", {r, F(b, 1.0 / 6.0)})}));
  } else {
    b.Output(b.Op("Div", {b.Op("Mul", {x, r}), F(b, 6.0)}));
  }
  return b.Build();
}

TEST(RecognizeHardSwish, FusesXTimesClipOfXPlus3Over6) {
  for (bool divide_first : {false, true}) {
    auto g = Relu6HardSwish(divide_first);
    EXPECT_TRUE(RecognizeAndCompare(*g, kActFeeds)) << divide_first;
    ASSERT_EQ(g->nodes().size(), 1u);
    EXPECT_EQ(g->nodes()[0]->op_type, "HardSwish");
  }
}

TEST(RecognizeHardSwish, DoesNotFuseClipWithOtherBounds) {
  auto g = Relu6HardSwish(false, /*hi=*/5.0);
  EXPECT_FALSE(RecognizeAndCompare(*g, kActFeeds));
  EXPECT_EQ(CountOps(*g, "Clip"), 1);
}

TEST(RecognizeSilu, FusesXTimesSigmoidIntoFusedElementwise) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 6});
  Value* h = b.Op("Tanh", {x});  // not a Conv/MatMul: nothing else would fuse it
  b.Output(b.Op("Mul", {b.Op("Sigmoid", {h}), h}));
  auto g = b.Build();
  EXPECT_TRUE(RecognizeAndCompare(*g, kActFeeds));
  ASSERT_EQ(g->nodes().size(), 2u);
  const Node* f = FindOp(*g, kiln_ops::kFusedElementwise);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->domain, kKilnDomain);
  absl::StatusOr<kiln_ops::Program> p = kiln_ops::ReadProgram(*f);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->instructions.size(), 2u);
  EXPECT_EQ(p->instructions[0].op, "Sigmoid");
  EXPECT_EQ(p->instructions[0].operands, (std::vector<int64_t>{0}));
  EXPECT_EQ(p->instructions[1].op, "Mul");
  EXPECT_EQ(p->instructions[1].operands, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(p->dtype, DType::kFloat32);
}

TEST(RecognizeSilu, DoesNotFuseWhenSigmoidIsAGraphOutput) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 6});
  Value* s = b.Op("Sigmoid", {x});
  b.Output(b.Op("Mul", {x, s}));
  b.Output(s);
  auto g = b.Build();
  EXPECT_FALSE(RecognizeAndCompare(*g, kActFeeds));
  EXPECT_EQ(CountOps(*g, "Sigmoid"), 1);
}

TEST(RecognizeSilu, LeavesSiluAfterMatMulToTheEpilogueFusion) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 6});
  Value* mm = b.Op("MatMul", {x, b.Constant("w", Ramp({6, 3}, 0.3, 0.0))});
  b.Output(b.Op("Mul", {mm, b.Op("Sigmoid", {mm})}));
  auto g = b.Build();
  EXPECT_FALSE(RecognizeAndCompare(*g, kActFeeds));
  EXPECT_EQ(CountOps(*g, "Sigmoid"), 1);
}

TEST(RecognizePatterns, RecognizesSeveralPatternsInOneGraphThroughThePassWrapper) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 6});
  Value* hs = b.Op("Mul", {x, b.Op("HardSigmoid", {x}, {{"alpha", Attribute::Float(1.0f / 6)}})});
  Value* u = b.Op("Div", {hs, F(b, 1.4142135)});
  Value* gelu =
      b.Op("Mul", {b.Op("Mul", {hs, b.Op("Add", {b.Op("Erf", {u}), F(b, 1.0)})}), F(b, 0.5)});
  b.Output(b.Op("Mul", {gelu, b.Op("Sigmoid", {gelu})}));
  auto g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  RecognizePatternsPass pass;
  EXPECT_EQ(pass.name(), "recognize_patterns");
  absl::StatusOr<PassStats> stats = pass.Run(*g);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_TRUE(stats->changed);
  EXPECT_EQ(stats->ops_after, 3u);
  EXPECT_EQ(CountOps(*g, "HardSwish"), 1);
  EXPECT_EQ(CountOps(*g, "Gelu"), 1);
  EXPECT_EQ(CountOps(*g, kiln_ops::kFusedElementwise), 1);
  absl::StatusOr<bool> again = RecognizePatterns(*g);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);  // idempotent
}

// The O2 order the passes rely on (see pipeline.cc).
TEST(Pipeline, PlacesTheNewPassesWhereTheirInputsAreReady) {
  std::vector<std::string> o2 = PipelinePasses(OptLevel::kO2);
  auto at = [&](const std::string& name) {
    return static_cast<int>(std::find(o2.begin(), o2.end(), name) - o2.begin());
  };
  const int n = static_cast<int>(o2.size());
  ASSERT_LT(at("recognize_patterns"), n);
  ASSERT_LT(at("simplify_reshapes"), n);
  ASSERT_LT(at("fold_scale_into_weights"), n);
  EXPECT_GT(at("recognize_patterns"), at("eliminate_identity"));
  EXPECT_LT(at("recognize_patterns"), at("fuse_matmul_epilogue"));
  EXPECT_GT(at("simplify_reshapes"), at("eliminate_common_subexpressions"));
  EXPECT_EQ(at("fold_scale_into_weights"), at("fold_batchnorm") + 1);
  EXPECT_LT(at("fold_scale_into_weights"), at("fuse_conv_epilogue"));
  for (const char* name : {"recognize_patterns", "simplify_reshapes", "fold_scale_into_weights"}) {
    absl::StatusOr<std::unique_ptr<Pass>> p = MakePass(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ((*p)->name(), name);
  }
  const std::vector<std::string> o1 = PipelinePasses(OptLevel::kO1);
  EXPECT_EQ(std::find(o1.begin(), o1.end(), "recognize_patterns"), o1.end());
}

}  // namespace
}  // namespace kiln::passes
