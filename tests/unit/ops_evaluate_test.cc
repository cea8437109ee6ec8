// ops/evaluate.h: the one rule by which the compiler and the engines evaluate a node whose
// inputs are all constant.
#include <gtest/gtest.h>

#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ops/evaluate.h"

namespace kiln::ref {
namespace {

TEST(EvaluateConstantNode, ComputesTheReferenceKernelOverConstantInputs) {
  GraphBuilder b;
  Value* x = b.Constant("x", Tensor::FromFloat({1, 2, 3}, {3}));
  Value* y = b.Constant("y", Tensor::FromFloat({10, 20, 30}, {3}));
  Value* sum = b.Op("Add", {x, y});
  absl::StatusOr<std::vector<Tensor>> out = EvaluateConstantNode(*sum->producer);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0].shape(), (std::vector<int64_t>{3}));
  EXPECT_EQ((*out)[0].GetDouble(2), 33.0);
}

TEST(EvaluateConstantNode, RefusesAGraphInput) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {3});
  Value* y = b.Constant("y", Tensor::FromFloat({10, 20, 30}, {3}));
  Value* sum = b.Op("Add", {x, y});
  absl::StatusOr<std::vector<Tensor>> out = EvaluateConstantNode(*sum->producer);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition) << out.status();
}

TEST(EvaluateConstantNode, AnOpWithoutKernelIsUnimplemented) {
  GraphBuilder b;
  Value* x = b.Constant("x", Tensor::FromFloat({1, 2, 3}, {3}));
  Value* y = b.Op("NoSuchOp", {x}, {}, "com.example");
  EXPECT_EQ(EvaluateConstantNode(*y->producer).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(IsDeterministic, RandomGeneratorsAndTrainingDropoutAreNot) {
  GraphBuilder b;
  Value* shape_like = b.Constant("like", Tensor::FromFloat({0, 0}, {2}));
  for (const char* op : {"RandomNormalLike", "RandomUniformLike", "Bernoulli"}) {
    EXPECT_FALSE(IsDeterministic(*b.Op(op, {shape_like})->producer)) << op;
    EXPECT_EQ(EvaluateConstantNode(*b.Op(op, {shape_like})->producer).status().code(),
              absl::StatusCode::kFailedPrecondition)
        << op;
  }
  EXPECT_FALSE(IsDeterministic(*b.Op("RandomNormal", {})->producer));
  // The same op name in another domain is someone else's op.
  EXPECT_TRUE(IsDeterministic(*b.Op("RandomNormal", {}, {}, "com.example")->producer));

  Value* x = b.Constant("x", Tensor::FromFloat({1, 2}, {2}));
  Value* ratio = b.Constant("ratio", Tensor::FromFloat({0.5f}, {}));
  Tensor on(DType::kBool, {});
  on.SetDouble(0, 1.0);
  Tensor off(DType::kBool, {});
  Value* training = b.Constant("training", on);
  Value* inference = b.Constant("inference", off);
  Value* unknown = b.Input("mode", DType::kBool, {});
  EXPECT_TRUE(IsDeterministic(*b.Op("Dropout", {x})->producer));
  EXPECT_TRUE(IsDeterministic(*b.Op("Dropout", {x, ratio, inference})->producer));
  EXPECT_FALSE(IsDeterministic(*b.Op("Dropout", {x, ratio, training})->producer));
  EXPECT_FALSE(IsDeterministic(*b.Op("Dropout", {x, ratio, unknown})->producer));
}

// Shape inference folds small all-constant nodes; a random generator over a constant shape
// stays a node (its value changes every run), while a deterministic one over the same inputs
// folds.
TEST(IsDeterministic, ShapeInferenceDoesNotFreezeATrainingDropout) {
  GraphBuilder b;
  Value* x = b.Constant("x", Tensor::FromFloat({1, 2}, {2}));
  Value* ratio = b.Constant("ratio", Tensor::FromFloat({0.0f}, {}));
  Tensor on(DType::kBool, {});
  on.SetDouble(0, 1.0);
  Value* training = b.Constant("training", on);
  Value* random = b.Op("Dropout", {x, ratio, training});
  Value* plain = b.Op("Relu", {x});
  b.Output(random);
  b.Output(plain);
  std::unique_ptr<Graph> g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  EXPECT_FALSE(random->constant.has_value());
  EXPECT_TRUE(plain->constant.has_value());
}

}  // namespace
}  // namespace kiln::ref
