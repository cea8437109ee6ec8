// Pass tests check structure (changed flag, op counts) and numbers (the reference interpreter
// on the graph before and after, same inputs).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "compiler/passes/eliminate_common_subexpressions.h"
#include "compiler/passes/eliminate_dead_code.h"
#include "compiler/passes/eliminate_identity.h"
#include "compiler/passes/fold_batchnorm.h"
#include "compiler/passes/fold_constants.h"
#include "compiler/pipeline.h"
#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ir/verifier.h"
#include "ops/interpreter.h"
#include "tests/unit/pass_test_util.h"

namespace kiln::passes {
namespace {

using testing::CountOps;
using testing::FindOp;
using testing::RunPassAndCompare;

Tensor Input4() { return Tensor::FromFloat({-1.0f, 2.0f, -3.0f, 4.0f}, {2, 2}); }



TEST(EliminateIdentity, RemovesIdentityChainAndNoOpReshape) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 2});
  Value* a = b.Op("Identity", {x});
  Value* s = b.Constant("s", Tensor::FromInt64({2, 2}));
  Value* r = b.Op("Reshape", {a, s});
  Value* y = b.Op("Relu", {r});
  b.Output(y);
  auto g = b.Build();
  EXPECT_TRUE(RunPassAndCompare(*g, EliminateIdentity, {{"x", Input4()}}));
  EXPECT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(CountOps(*g, "Relu"), 1);
}

TEST(EliminateIdentity, KeepsIdentityThatIsAGraphOutputAndUsedDropoutMask) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 2});
  auto d = b.OpN("Dropout", {x}, 2);
  Value* y = b.Op("Identity", {d[0]});
  b.Output(y);
  b.Output(d[1]);  // the mask is used: Dropout must stay
  auto g = b.Build();
  EXPECT_FALSE(RunPassAndCompare(*g, EliminateIdentity, {{"x", Input4()}}));
  EXPECT_EQ(g->nodes().size(), 2u);
}

// Training-mode Dropout with ratio 0 drops nothing and scales by 1: a copy. With a ratio of
// 0.3 it is random (and not an identity), whatever GetInt would truncate 0.3 to.
TEST(EliminateIdentity, TrainingDropoutWithRatioZeroIsACopyButNotRatio03) {
  for (float ratio : {0.0f, 0.3f}) {
    GraphBuilder b;
    Value* x = b.Input("x", DType::kFloat32, {2, 2});
    Value* r = b.Constant("ratio", Tensor::Scalar(DType::kFloat32, ratio));
    Value* t = b.Constant("training", Tensor::Scalar(DType::kBool, 1));
    b.Output(b.Op("Relu", {b.Op("Dropout", {x, r, t})}));
    auto g = b.Build();
    auto changed = EliminateIdentity(*g);
    ASSERT_TRUE(changed.ok());
    EXPECT_EQ(*changed, ratio == 0.0f) << ratio;
    EXPECT_EQ(CountOps(*g, "Dropout"), ratio == 0.0f ? 0 : 1);
  }
}

TEST(EliminateDeadCode, RemovesUnusedBranchAndInitializer) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 2});
  Value* w = b.Constant("w", Tensor::FromFloat({1, 1, 1, 1}, {2, 2}));
  b.Op("Add", {x, w});  // dead
  Value* y = b.Op("Relu", {x});
  b.Output(y);
  auto g = b.Build();
  EXPECT_TRUE(RunPassAndCompare(*g, EliminateDeadCode, {{"x", Input4()}}));
  EXPECT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->FindValue("w"), nullptr);
}

TEST(EliminateDeadCode, KeepsNodeWithOneLiveOutput) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 2});
  auto outs = b.OpN("TopK", {x, b.Constant("k", Tensor::FromInt64({1}, {1}))}, 2);
  b.Output(outs[0]);
  auto g = b.Build();
  ASSERT_TRUE(EliminateDeadCode(*g).ok());
  EXPECT_EQ(g->nodes().size(), 1u);
}

TEST(FoldConstants, FoldsConstantArithmetic) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 2});
  Value* c1 = b.Constant("c1", Tensor::FromFloat({1, 2, 3, 4}, {2, 2}));
  Value* c2 = b.Constant("c2", Tensor::FromFloat({1, 1, 1, 1}, {2, 2}));
  Value* c = b.Op("Add", {c1, c2});
  Value* y = b.Op("Mul", {x, c});
  b.Output(y);
  auto g = b.Build();
  // Shape inference folds small constant nodes itself; switch that off to test the pass.
  shape::InferOptions no_fold;
  no_fold.max_fold_elements = 0;
  ASSERT_TRUE(shape::InferShapes(*g, no_fold).ok());
  ASSERT_EQ(CountOps(*g, "Add"), 1);
  auto before = g->Clone();
  EXPECT_TRUE(*FoldConstants(*g));
  EXPECT_TRUE(VerifyGraph(*g).ok());
  auto want = ref::Run(*before, {{"x", Input4()}});
  auto got = ref::Run(*g, {{"x", Input4()}});
  ASSERT_TRUE(want.ok() && got.ok());
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(want->begin()->second.GetDouble(i), got->begin()->second.GetDouble(i));
  }
  EXPECT_EQ(CountOps(*g, "Add"), 0);
  EXPECT_EQ(CountOps(*g, "Mul"), 1);
}

TEST(FoldConstants, DoesNotInflateConstantOfShapeBeyondCap) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 2});
  Value* shape = b.Constant("shape", Tensor::FromInt64({1024, 1024}));
  Value* big = b.Op("ConstantOfShape", {shape});
  Value* y = b.Op("Add", {x, b.Op("ReduceSum", {big})});
  b.Output(y);
  auto g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  ASSERT_TRUE(FoldConstants(*g).ok());
  EXPECT_EQ(CountOps(*g, "ConstantOfShape"), 1);
}

// int8 weights of 128 KiB dequantize to 512 KiB of float32 weights (past the 64 KiB cap, 4x
// its input): folded, as a backend without int8 kernels needs them so; a Tile to the same
// size (4x its input too) is not.
TEST(FoldConstants, DequantizedWeightsGrowToFloatButOtherOpsDoNot) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 512});
  Tensor wq(DType::kInt8, {512, 256});
  for (int64_t i = 0; i < wq.numel(); ++i) wq.SetInt(i, i % 255 - 127);
  Value* w = b.Op("DequantizeLinear", {b.Constant("wq", wq), b.Constant("s", Tensor::FromFloat({0.01f}))});
  Value* big = b.Op("Tile", {b.Constant("t", Tensor::FromFloat(std::vector<float>(32768, 1.f), {128, 256})),
                             b.Constant("reps", Tensor::FromInt64({4, 1}))});
  b.Output(b.Op("MatMul", {x, w}));
  b.Output(b.Op("ReduceSum", {big}));
  auto g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  ASSERT_TRUE(FoldConstants(*g).ok());
  EXPECT_EQ(CountOps(*g, "DequantizeLinear"), 0);
  EXPECT_EQ(CountOps(*g, "Tile"), 1);
}

// x [1, 256] times Transpose(W) for a 256x256 weight (256 KiB, above the cache's floor) and
// plus Transpose(small) for a 4x4 one (below it).
std::unique_ptr<Graph> TransposedWeightGraph(const Tensor& w, const Tensor& small) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 256});
  Value* wt = b.Op("Transpose", {b.Constant("w", w)}, {{"perm", Attribute::Ints({1, 0})}});
  Value* st = b.Op("Transpose", {b.Constant("s", small)}, {{"perm", Attribute::Ints({1, 0})}});
  b.Output(b.Op("MatMul", {x, wt}));
  b.Output(st);
  auto g = b.Build();
  shape::InferOptions no_fold;
  no_fold.max_fold_elements = 0;
  EXPECT_TRUE(shape::InferShapes(*g, no_fold).ok());
  return g;
}

const Tensor& ConstantFeeding(const Graph& g, const std::string& op) {
  const Node* n = FindOp(g, op);
  return *n->inputs[1]->constant;
}

// Two compiles of clones of one graph (one model's buckets) fold the large weight once and
// share the result; a small fold is computed again; other weights (another buffer, even with
// equal bytes) are never taken for the cached ones.
TEST(FoldConstants, ACacheSharesLargeFoldsAcrossClonesOfOneGraph) {
  Tensor w(DType::kFloat32, {256, 256});
  for (int64_t i = 0; i < w.numel(); ++i) w.SetDouble(i, static_cast<double>(i % 97) - 48);
  const Tensor small = Tensor::FromFloat(std::vector<float>(16, 2.f), {4, 4});
  auto model = TransposedWeightGraph(w, small);
  FoldConstantsOptions options;
  options.cache = std::make_shared<FoldCache>();
  auto g1 = model->Clone(), g2 = model->Clone();
  ASSERT_TRUE(*FoldConstants(*g1, options));
  EXPECT_EQ(options.cache->hits(), 0u);
  EXPECT_EQ(options.cache->size(), 1u);  // the 4x4 transpose is not cached
  ASSERT_TRUE(*FoldConstants(*g2, options));
  EXPECT_EQ(options.cache->hits(), 1u);
  const Tensor& w1 = ConstantFeeding(*g1, "MatMul");
  const Tensor& w2 = ConstantFeeding(*g2, "MatMul");
  EXPECT_EQ(w1.raw(), w2.raw());  // one folded buffer
  EXPECT_EQ(w1.shape(), (std::vector<int64_t>{256, 256}));
  EXPECT_EQ(w1.GetDouble(1), w.GetDouble(256));  // transposed
  EXPECT_NE(g1->outputs[1]->constant->raw(), g2->outputs[1]->constant->raw());

  // A copy of the weights in another buffer: a miss, folded on its own.
  Tensor copy(DType::kFloat32, {256, 256});
  std::memcpy(copy.mutable_data<float>(), w.data<float>(), w.nbytes());
  copy.mutable_data<float>()[1] = 1000.f;
  auto other = TransposedWeightGraph(copy, small);
  ASSERT_TRUE(*FoldConstants(*other, options));
  EXPECT_EQ(options.cache->hits(), 1u);
  const Tensor& w3 = ConstantFeeding(*other, "MatMul");
  EXPECT_NE(w3.raw(), w1.raw());
  EXPECT_EQ(w3.GetDouble(256), 1000.0);
}

// Conv [8, 4, 3, 3] -> BatchNormalization over `bn_scale`'s parameters.
std::unique_ptr<Graph> ConvBatchNormGraph(const Tensor& w, const Tensor& bn_scale) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 4, 6, 6});
  Value* c = b.Op("Conv", {x, b.Constant("w", w)}, {{"pads", Attribute::Ints({1, 1, 1, 1})}});
  auto per_channel = [&](const char* name, float v) {
    return b.Constant(name, Tensor::FromFloat(std::vector<float>(8, v), {8}));
  };
  b.Output(b.Op("BatchNormalization", {c, b.Constant("gamma", bn_scale), per_channel("beta", 0.5f),
                                       per_channel("mean", 0.25f), per_channel("var", 2.f)}));
  auto g = b.Build();
  EXPECT_TRUE(shape::InferShapes(*g).ok());
  return g;
}

// One model's buckets rescale each Conv weight once (one tensor for all), and answer as the
// graph before the pass; another BatchNorm (other parameter buffers) is folded on its own.
TEST(FoldBatchNorm, ACacheSharesTheRescaledWeightsAcrossClones) {
  Tensor w(DType::kFloat32, {8, 4, 3, 3});
  for (int64_t i = 0; i < w.numel(); ++i) w.SetDouble(i, static_cast<double>(i % 13) / 7 - 0.9);
  const Tensor gamma = Tensor::FromFloat({1, 2, 3, 4, 5, 6, 7, 8}, {8});
  auto model = ConvBatchNormGraph(w, gamma);
  auto cache = std::make_shared<FoldCache>();
  auto g1 = model->Clone(), g2 = model->Clone();
  ASSERT_TRUE(*FoldBatchNormWithCache(*g1, cache.get()));
  ASSERT_TRUE(*FoldBatchNormWithCache(*g2, cache.get()));
  EXPECT_EQ(cache->hits(), 1u);
  EXPECT_EQ(CountOps(*g2, "BatchNormalization"), 0);
  const Tensor& w1 = ConstantFeeding(*g1, "Conv");
  EXPECT_EQ(w1.raw(), ConstantFeeding(*g2, "Conv").raw());
  Tensor x(DType::kFloat32, {1, 4, 6, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.SetDouble(i, static_cast<double>(i % 11) - 5);
  auto want = ref::Run(*model, {{"x", x}});
  auto got = ref::Run(*g2, {{"x", x}});
  ASSERT_TRUE(want.ok() && got.ok());
  const Tensor &a = want->begin()->second, &b = got->begin()->second;
  for (int64_t i = 0; i < a.numel(); ++i) {
    ASSERT_NEAR(b.GetDouble(i), a.GetDouble(i), 1e-4 * (1 + std::abs(a.GetDouble(i)))) << i;
  }
  auto other = ConvBatchNormGraph(w, gamma.Clone());  // equal values, another buffer
  ASSERT_TRUE(*FoldBatchNormWithCache(*other, cache.get()));
  EXPECT_EQ(cache->hits(), 1u);
  EXPECT_NE(ConstantFeeding(*other, "Conv").raw(), w1.raw());
}

TEST(EliminateCommonSubexpressions, MergesIdenticalNodes) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 2});
  Value* a = b.Op("Relu", {x});
  Value* c = b.Op("Relu", {x});
  Value* y = b.Op("Add", {a, c});
  b.Output(y);
  auto g = b.Build();
  EXPECT_TRUE(RunPassAndCompare(*g, EliminateCommonSubexpressions, {{"x", Input4()}}));
  EXPECT_EQ(CountOps(*g, "Relu"), 1);
}

TEST(EliminateCommonSubexpressions, KeepsNodesWithDifferentAttributes) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 2});
  Value* a = b.Op("LeakyRelu", {x}, {{"alpha", Attribute::Float(0.1f)}});
  Value* c = b.Op("LeakyRelu", {x}, {{"alpha", Attribute::Float(0.2f)}});
  Value* y = b.Op("Add", {a, c});
  b.Output(y);
  auto g = b.Build();
  EXPECT_FALSE(RunPassAndCompare(*g, EliminateCommonSubexpressions, {{"x", Input4()}}));
  EXPECT_EQ(CountOps(*g, "LeakyRelu"), 2);
}

// x [1,2,2,2] (the 2x2 test input viewed as one 2-channel 1x2 image is not enough: use a
// 4-element input as [1, 1, 2, 2] and a conv with two output channels).
std::unique_ptr<Graph> ConvBatchNorm(bool second_consumer) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 2});
  Value* shape = b.Constant("shape", Tensor::FromInt64({1, 1, 2, 2}));
  Value* img = b.Op("Reshape", {x, shape});
  Value* w = b.Constant("w", Tensor::FromFloat({0.5f, -1.0f, 2.0f, 0.25f}, {2, 1, 1, 2}));
  Value* bias = b.Constant("bias", Tensor::FromFloat({0.1f, -0.2f}, {2}));
  Value* conv = b.Op("Conv", {img, w, bias});
  Value* y = b.Op("BatchNormalization",
                  {conv, b.Constant("g", Tensor::FromFloat({1.5f, 0.5f})),
                   b.Constant("be", Tensor::FromFloat({0.2f, -0.3f})),
                   b.Constant("m", Tensor::FromFloat({0.1f, 0.4f})),
                   b.Constant("v", Tensor::FromFloat({2.0f, 0.5f}))},
                  {{"epsilon", Attribute::Float(1e-3f)}});
  b.Output(y);
  if (second_consumer) b.Output(b.Op("Relu", {conv}));
  return b.Build();
}

TEST(FoldBatchNorm, FoldsIntoConvWeights) {
  auto g = ConvBatchNorm(false);
  EXPECT_TRUE(RunPassAndCompare(*g, FoldBatchNorm, {{"x", Input4()}}, {1e-6, 1e-6}));
  EXPECT_EQ(CountOps(*g, "BatchNormalization"), 0);
  EXPECT_EQ(CountOps(*g, "Conv"), 1);
  EXPECT_EQ(g->outputs[0]->producer->op_type, "Conv");
}

TEST(FoldBatchNorm, DoesNotFoldWhenConvOutputHasSecondConsumer) {
  auto g = ConvBatchNorm(true);
  EXPECT_TRUE(RunPassAndCompare(*g, FoldBatchNorm, {{"x", Input4()}}, {1e-6, 1e-6}));  // lowered to Mul + Add instead
  EXPECT_EQ(CountOps(*g, "BatchNormalization"), 0);
  EXPECT_EQ(CountOps(*g, "Mul"), 1);
  EXPECT_EQ(CountOps(*g, "Add"), 1);
  EXPECT_EQ(g->FindValue("w")->constant->GetDouble(0), 0.5);  // weights untouched
}

// Constants of 1 MiB: a copy in another buffer merges, one that differs in a single byte
// (which no sample of the hash lands on) stays.
TEST(EliminateCommonSubexpressions, MergesEqualLargeConstantsOnlyWhenEveryByteMatches) {
  Tensor w(DType::kFloat32, {512, 512});
  for (int64_t i = 0; i < w.numel(); ++i) w.SetDouble(i, static_cast<double>(i % 97) / 13);
  Tensor near = w.Clone();
  near.mutable_data<float>()[w.numel() / 2 + 5] += 1.0f;
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {512, 512});
  Value* s1 = b.Op("Add", {x, b.Constant("w1", w)});
  Value* s2 = b.Op("Add", {s1, b.Constant("w2", w.Clone())});
  b.Output(b.Op("Add", {s2, b.Constant("w3", near)}));
  auto g = b.Build();
  ASSERT_TRUE(*EliminateCommonSubexpressions(*g));
  const auto& nodes = g->nodes();
  EXPECT_EQ(nodes[0]->input(1), nodes[1]->input(1));
  EXPECT_NE(nodes[2]->input(1), nodes[0]->input(1));
  EXPECT_EQ(nodes[2]->input(1)->name, "w3");
  EXPECT_TRUE(VerifyGraph(*g).ok());
}

// Weights large enough for the pass's huge-page block: every element is float(w * scale) of
// its channel (the same bits as before the block), and both Convs fold.
TEST(FoldBatchNorm, LargeWeightsFoldToTheSameBits) {
  Tensor w(DType::kFloat32, {256, 256, 3, 3});  // 2.25 MiB
  for (int64_t i = 0; i < w.numel(); ++i) w.SetDouble(i, static_cast<double>(i % 29) / 7 - 2);
  std::vector<float> gamma(256), var(256);
  for (int c = 0; c < 256; ++c) gamma[c] = 0.5f + c / 100.0f, var[c] = 0.25f + c / 300.0f;
  GraphBuilder b;
  Value* h = b.Input("x", DType::kFloat32, {1, 256, 4, 4});
  for (int layer = 0; layer < 2; ++layer) {
    Value* conv = b.Op("Conv", {h, b.Constant("w" + std::to_string(layer), w)},
                       {{"pads", Attribute::Ints({1, 1, 1, 1})}});
    const Tensor zeros(DType::kFloat32, {256});
    h = b.Op("BatchNormalization",
             {conv, b.Constant("g" + std::to_string(layer), Tensor::FromFloat(gamma, {256})),
              b.Constant("be" + std::to_string(layer), zeros),
              b.Constant("m" + std::to_string(layer), zeros),
              b.Constant("v" + std::to_string(layer), Tensor::FromFloat(var, {256}))});
  }
  b.Output(h);
  auto g = b.Build();
  ASSERT_TRUE(*FoldBatchNorm(*g));
  EXPECT_EQ(CountOps(*g, "BatchNormalization"), 0);
  for (const auto& n : g->nodes()) {
    const Tensor& folded = *n->input(1)->constant;
    for (int64_t i = 0; i < w.numel(); i += 997) {
      const int64_t c = i / (w.numel() / 256);
      const double s = gamma[c] / std::sqrt(static_cast<double>(var[c]) + 1e-5f);
      ASSERT_EQ(folded.data<float>()[i], static_cast<float>(w.data<float>()[i] * s)) << i;
    }
  }
}

TEST(Pipeline, RejectsUnknownPassAndO0DoesNothing) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 2});
  b.Output(b.Op("Identity", {b.Op("Identity", {x})}));
  auto g = b.Build();
  PipelineOptions o;
  o.disabled = {"no_such_pass"};
  EXPECT_FALSE(RunPipeline(*g, o).ok());
  o.disabled.clear();
  o.level = OptLevel::kO0;
  auto stats = RunPipeline(*g, o);
  ASSERT_TRUE(stats.ok());
  EXPECT_TRUE(stats->empty());
  EXPECT_EQ(g->nodes().size(), 2u);
  o.level = OptLevel::kO1;
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  ASSERT_TRUE(RunPipeline(*g, o).ok());
  EXPECT_EQ(g->nodes().size(), 1u);  // the Identity that is the graph output stays
}

}  // namespace
}  // namespace kiln::passes
