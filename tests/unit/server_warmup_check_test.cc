// The warm-up check's rows (server/model/model_builder.h): one reference run on the smallest
// bucket (finite and non-finite feeds), larger buckets checked on batches that repeat those
// rows between distractor rows. A pass broken only at the largest bucket is still found and
// switched off; the row helpers tile and pick rows as documented.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler/passes/pass.h"
#include "compiler/pipeline.h"
#include "ir/builder.h"
#include "runtime/check/differential.h"
#include "server/model/model_builder.h"

namespace kiln::server {
namespace {

Tensor Rows(int64_t rows, int64_t cols, float base, float step = 1.f) {
  Tensor t(DType::kFloat32, {rows, cols});
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.mutable_data<float>()[i] = base + step * static_cast<float>(i);
  }
  return t;
}

TEST(CheckRows, TileCyclesThroughEverySourceInOrder) {
  ref::TensorMap a = {{"x", Rows(2, 3, 0.f)}}, b = {{"x", Rows(1, 3, 100.f)}};
  auto t = check::TileRows({&a, &b}, 7);
  ASSERT_TRUE(t.ok()) << t.status();
  const Tensor& x = t->at("x");
  ASSERT_EQ(x.shape(), (std::vector<int64_t>{7, 3}));
  // rows: a0 a1 b0 a0 a1 b0 a0
  const float first[] = {0, 3, 100, 0, 3, 100, 0};
  for (int r = 0; r < 7; ++r) EXPECT_EQ(x.data<float>()[r * 3], first[r]) << r;
}

TEST(CheckRows, TileRefusesSourcesThatDoNotMatch) {
  ref::TensorMap a = {{"x", Rows(2, 3, 0.f)}}, b = {{"x", Rows(2, 4, 0.f)}}, c = {{"y", Rows(1, 3, 0.f)}};
  EXPECT_FALSE(check::TileRows({&a, &b}, 4).ok());
  EXPECT_FALSE(check::TileRows({&a, &c}, 4).ok());
  EXPECT_FALSE(check::TileRows({&a}, 0).ok());
}

TEST(CheckRows, NonFiniteFeedKeepsShapesAndPlantsEveryKind) {
  ref::TensorMap feed = {{"x", Rows(64, 64, 0.f)}};
  const ref::TensorMap nf = check::WithNonFiniteValues(feed, 7);
  const Tensor& x = nf.at("x");
  ASSERT_EQ(x.shape(), feed.at("x").shape());
  int nan = 0, inf = 0, negzero = 0, denormal = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float v = x.data<float>()[i];
    nan += std::isnan(v);
    inf += std::isinf(v);
    negzero += v == 0.f && std::signbit(v);
    denormal += std::fpclassify(v) == FP_SUBNORMAL;
  }
  EXPECT_GT(nan, 0);
  EXPECT_GT(inf, 0);
  EXPECT_GT(negzero, 0);
  EXPECT_GT(denormal, 0);
  EXPECT_EQ(check::WithNonFiniteValues(feed, 7).at("x").nbytes(), x.nbytes());
}

// Perturbs a constant only in graphs compiled for batch 8: the smallest bucket's direct check
// cannot see it; the batch-8 check on repeated rows must.
class BreakAtBatch8 : public passes::Pass {
 public:
  std::string name() const override { return "test_break_at_batch_8"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override {
    const Value* x = graph.inputs.empty() ? nullptr : graph.inputs[0];
    if (!x || !x->shape || x->shape->empty() || !(*x->shape)[0].known() ||
        (*x->shape)[0].value != 8) {
      return false;
    }
    for (const auto& node : graph.mutable_nodes()) {
      for (Value*& in : node->inputs) {
        if (!in || !in->is_constant() || in->dtype != DType::kFloat32) continue;
        Tensor t = in->constant->Clone();
        for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] += 1.0f;
        in = graph.AddConstant(in->name + "_broken", std::move(t));
        graph.PruneUnusedValues();
        return true;
      }
    }
    return false;
  }
};

std::unique_ptr<Graph> Mlp() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("batch"), Dim(6)});
  // Small weights, and an output that moves with every logit: a perturbed constant shows.
  Value* h = b.Op("Relu", {b.Op("Gemm", {x, b.Constant("w", Rows(6, 5, -0.1f, 0.01f)),
                                         b.Constant("c", Rows(1, 5, 0.1f, 0.01f))},
                                {{"transB", Attribute::Int(0)}})});
  b.Output(b.Op("Sigmoid", {h}));
  return b.Build();
}

TEST(WarmupCheck, EveryBucketCheckedFromOneSmallReferenceRun) {
  ModelConfig config;
  config.max_batch_size = 8;
  ASSERT_TRUE(FinalizeModelConfig(config).ok());
  auto built = BuildModel(*Mlp(), config, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->engines.size(), config.batch_buckets.size());
  EXPECT_TRUE(built->check.ran && built->check.ok) << built->check.message;
  EXPECT_TRUE(built->check.nonfinite_checked);
  EXPECT_TRUE(built->check.nonfinite_ok) << built->check.nonfinite_message;
  EXPECT_GT(built->times.reference_ms, 0.0);
}

TEST(WarmupCheck, APassBrokenOnlyAtTheLargestBucketIsFoundThere) {
  static const bool registered = RegisterTestPass(
      "test_break_at_batch_8", [] { return std::make_unique<BreakAtBatch8>(); },
      "eliminate_dead_code").ok();
  ASSERT_TRUE(registered);
  ModelConfig config;
  config.max_batch_size = 8;
  ASSERT_TRUE(FinalizeModelConfig(config).ok());
  auto built = BuildModel(*Mlp(), config, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_TRUE(built->check.ok);
  EXPECT_EQ(built->check.disabled_passes.count("test_break_at_batch_8"), 1u)
      << built->check.message;
  EXPECT_NE(built->check.message.find("batch 8"), std::string::npos) << built->check.message;
}

}  // namespace
}  // namespace kiln::server
