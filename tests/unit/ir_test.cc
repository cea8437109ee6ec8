#include <gtest/gtest.h>

#include "ir/builder.h"
#include "ir/graph_edit.h"
#include "ir/verifier.h"

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

// The batch edits leave the graph as the one-at-a-time calls do.
TEST(GraphEdit, BatchEditsMatchOneAtATime) {
  auto build = [] {
    GraphBuilder b;
    Value* h = b.Input("x", DType::kFloat32, {4});
    for (int i = 0; i < 6; ++i) h = b.Op("Relu", {h});
    b.Output(h);
    return b.Build();
  };
  auto names = [](const Graph& g) {
    std::string s;
    for (const auto& n : g.nodes()) s += n->name + ",";
    return s;
  };
  auto make = [](Graph& g, const std::string& name) {
    auto n = std::make_unique<Node>();
    n->op_type = "Neg";
    n->name = name;
    n->outputs = {g.NewValue(name)};
    return n;
  };
  auto one = build(), batch = build();
  std::vector<std::pair<Node*, std::unique_ptr<Node>>> inserts;
  for (Graph* g : {one.get(), batch.get()}) {
    const auto& n = g->nodes();
    Node *n1 = n[1].get(), *n3 = n[3].get(), *n4 = n[4].get();
    if (g == one.get()) {
      one->InsertNode(n3, make(*one, "a"));
      one->InsertNode(n3, make(*one, "b"));
      one->InsertNode(nullptr, make(*one, "c"));
      one->RemoveNode(n1);
      one->RemoveNode(n4);
    } else {
      inserts.emplace_back(n3, make(*batch, "a"));
      inserts.emplace_back(n3, make(*batch, "b"));
      inserts.emplace_back(nullptr, make(*batch, "c"));
      Value* out1 = n1->output(0);
      InsertNodes(*batch, std::move(inserts));
      RemoveNodes(*batch, {n1, n4});
      EXPECT_EQ(out1->producer, nullptr);
    }
  }
  EXPECT_EQ(names(*batch), names(*one));
  for (const auto& n : batch->nodes()) EXPECT_EQ(n->output(0)->producer, n.get()) << n->name;
}

TEST(GraphEdit, ReplaceAllUsesFollowsChainsIntoOutputs) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {4});
  Value* r1 = b.Op("Relu", {x});
  Value* r2 = b.Op("Relu", {r1});
  Value* r3 = b.Op("Relu", {r2});
  b.Output(r3);
  b.Output(r2);
  auto g = b.Build();
  ReplaceAllUses(*g, {{r2, r1}, {r1, x}});
  EXPECT_EQ(g->nodes()[1]->input(0), x);
  EXPECT_EQ(g->nodes()[2]->input(0), x);
  EXPECT_EQ(g->outputs[1], x);
  EXPECT_EQ(g->outputs[0], r3);
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
