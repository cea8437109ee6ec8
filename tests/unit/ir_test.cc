#include <gtest/gtest.h>

#include "compiler/ir/builder.h"
#include "compiler/ir/verifier.h"

namespace kiln {
namespace {

TEST(Dtype, HalfRoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(f)), f) << f;
  }
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);         // overflow to +inf
  EXPECT_EQ(FloatToHalf(1.0f + 1.0f / 4096), 0x3c00);  // ties to even
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(3.0f)), 3.0f);
}

TEST(Tensor, UninitializedIsAlignedAndSizedLikeZeroed) {
  const Tensor u = Tensor::Uninitialized(DType::kFloat32, {3, 5});
  const Tensor z(DType::kFloat32, {3, 5});
  EXPECT_EQ(u.nbytes(), z.nbytes());
  EXPECT_EQ(u.shape(), z.shape());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(u.raw()) % 64, 0u);
  for (int64_t i = 0; i < z.numel(); ++i) EXPECT_EQ(z.GetDouble(i), 0.0);  // the zeroed one is
  EXPECT_FALSE(u.SharesBufferWith(z));
  EXPECT_EQ(Tensor::Uninitialized(DType::kInt8, {0}).nbytes(), 0u);
}

TEST(Graph, CloneSharesConstantsAndVerifies) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {Dim::Symbol("N"), 4});
  Value* w = b.Constant("w", Tensor::FromFloat({1, 2, 3, 4}, {4}));
  Value* y = b.Op("Add", {x, w});
  b.Output(y);
  auto g = b.Build();
  ASSERT_TRUE(VerifyGraph(*g).ok());
  auto c = g->Clone();
  ASSERT_TRUE(VerifyGraph(*c).ok());
  EXPECT_TRUE(c->FindValue("w")->constant->SharesBufferWith(*g->FindValue("w")->constant));
  EXPECT_EQ(c->nodes().size(), 1u);
}

TEST(Verifier, RejectsUseBeforeDefinition) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2});
  Value* y = b.Op("Relu", {x});
  Value* z = b.Op("Relu", {y});
  b.Output(z);
  auto g = b.Build();
  std::swap(g->mutable_nodes()[0], g->mutable_nodes()[1]);
  EXPECT_FALSE(VerifyGraph(*g).ok());
  ASSERT_TRUE(g->TopologicalSort());
  EXPECT_TRUE(VerifyGraph(*g).ok());
}

TEST(Graph, TopologicalSortDetectsCycle) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2});
  Value* y = b.Op("Add", {x, x});
  b.Output(y);
  auto g = b.Build();
  g->mutable_nodes()[0]->inputs[1] = y;  // y = Add(x, y)
  EXPECT_FALSE(g->TopologicalSort());
}

}  // namespace
}  // namespace kiln
