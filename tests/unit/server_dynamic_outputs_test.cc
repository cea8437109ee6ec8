// Models whose output sizes depend on the input values (a detector's NonZero and
// NonMaxSuppression): kilnd builds them with the CPU engine's dynamic region, checks them at
// warm-up like any model, and reports the run-time dims as -1. A batchable one is refused
// unless it serves one request per run (its outputs have no rows to split a batch by).
#include <gtest/gtest.h>

#include "ir/builder.h"
#include "server/model/model_builder.h"

namespace kiln::server {
namespace {

// y = Relu(x); idx = NonZero(x > 0): [1, count of positives].
std::unique_ptr<Graph> Positives(Dim batch) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {batch, Dim(6)});
  b.Output(b.Op("Relu", {x}));
  b.Output(b.Op("NonZero", {b.Op("Greater", {x, b.Constant("zero", Tensor::FromFloat({0.f}))})}));
  return b.Build();
}

std::vector<int64_t> RunOn(runtime::Engine& e, std::vector<float> x, std::vector<Tensor>& out) {
  std::vector<Tensor> in = {Tensor::FromFloat(x, {1, static_cast<int64_t>(x.size())})};
  EXPECT_TRUE(e.Run(in, out).ok());
  return out.size() == 2 ? out[1].shape() : std::vector<int64_t>{};
}

TEST(DynamicOutputs, ServeWithSizesKnownPerRun) {
  ModelConfig config;
  ASSERT_TRUE(FinalizeModelConfig(config).ok());
  auto built = BuildModel(*Positives(Dim(1)), config, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_TRUE(built->check.ran && built->check.ok) << built->check.message;
  ASSERT_EQ(built->signature.outputs.size(), 2u);
  EXPECT_EQ(built->signature.outputs[1].shape, (std::vector<int64_t>{2, -1}));
  runtime::Engine& e = *built->engines.begin()->second[0];
  std::vector<Tensor> out;
  EXPECT_EQ(RunOn(e, {1, -1, 2, -3, 0, 5}, out), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(out[1].GetDouble(3 + 1), 2);  // row 1 (columns), the second positive: x[2]
  EXPECT_EQ(RunOn(e, {-1, -1, -1, -1, -1, -1}, out), (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(RunOn(e, {1, 1, 1, 1, 1, 1}, out), (std::vector<int64_t>{2, 6}));
}

TEST(DynamicOutputs, ABatchableModelMustServeOneRequestPerRun) {
  ModelConfig config;
  config.max_batch_size = 4;
  ASSERT_TRUE(FinalizeModelConfig(config).ok());
  auto built = BuildModel(*Positives(Dim::Symbol("batch")), config, nullptr);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(built.status().message().find("batch_buckets: [1]"), std::string::npos)
      << built.status();
  ModelConfig one;
  one.max_batch_size = 1;
  ASSERT_TRUE(FinalizeModelConfig(one).ok());
  EXPECT_TRUE(BuildModel(*Positives(Dim::Symbol("batch")), one, nullptr).ok());
}

}  // namespace
}  // namespace kiln::server
