// fuse_concat_elementwise tests: a channel Concat read only by a program becomes the
// program's operand 0 (structure: the Concat gone, `concat_inputs` set, the operands
// renumbered), the graph computes the same on the reference (its FusedElementwise kernel and
// shape rule take the concatenation), and the Concats it must leave.
#include "compiler/passes/fuse_concat_elementwise.h"

#include <gtest/gtest.h>

#include "compiler/passes/fuse_elementwise.h"
#include "ir/builder.h"
#include "ir/kiln_ops.h"
#include "tests/unit/pass_test_util.h"
#include "tests/unit/test_tensors.h"

namespace kiln::passes {
namespace {

using testing::CountOps;
using testing::FindOp;
using testing::SineRamp;

const ref::TensorMap kFeeds = {{"a", SineRamp({2, 16, 3, 3}, 0.37, 0.1)},
                               {"b", SineRamp({2, 8, 3, 3}, 0.21, -0.4)},
                               {"c", SineRamp({2, 24, 3, 3}, 0.53, 0.2)}};

struct Case {
  bool second_reader = false;  // the Concat is also a graph output
  bool full_operand = false;   // the program adds a full-shape tensor (c), not a per-channel one
  bool per_image = false;      // the scale is [N, C, 1, 1]
};

// Concat(a, b) -> Mul(scale) -> Add(shift or c) -> Relu, fused into one program first.
std::unique_ptr<Graph> ConcatProgram(const Case& k) {
  GraphBuilder b;
  Value* a = b.Input("a", DType::kFloat32, {2, 16, 3, 3});
  Value* bb = b.Input("b", DType::kFloat32, {2, 8, 3, 3});
  Value* c = b.Input("c", DType::kFloat32, {2, 24, 3, 3});
  Value* cat = b.Op("Concat", {a, bb}, {{"axis", Attribute::Int(1)}});
  const std::vector<int64_t> scale_shape =
      k.per_image ? std::vector<int64_t>{2, 24, 1, 1} : std::vector<int64_t>{1, 24, 1, 1};
  Value* m = b.Op("Mul", {cat, b.Constant("scale", SineRamp(scale_shape, 0.9, 0.5))});
  Value* shift = k.full_operand ? c : b.Constant("shift", SineRamp({24, 1, 1}, 0.3, -0.1));
  b.Output(b.Op("Relu", {b.Op("Add", {m, shift})}));
  if (k.second_reader) b.Output(cat);
  auto g = b.Build();
  EXPECT_TRUE(shape::InferShapes(*g).ok());
  EXPECT_TRUE(FuseElementwise(*g).ok());
  return g;
}

TEST(FuseConcatElementwise, TheProgramReadsThePieces) {
  for (bool per_image : {false, true}) {
    SCOPED_TRACE(per_image ? "per-image scale" : "per-channel scale");
    Case k;
    k.per_image = per_image;
    auto g = ConcatProgram(k);
    ASSERT_EQ(CountOps(*g, "FusedElementwise"), 1);
    EXPECT_TRUE(testing::RunPassAndCompare(*g, FuseConcatElementwise, kFeeds));
    EXPECT_EQ(CountOps(*g, "Concat"), 0);
    const Node* p = FindOp(*g, "FusedElementwise");
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(kiln_ops::ConcatInputs(*p), 2);
    EXPECT_EQ(p->inputs[0]->name, "a");
    EXPECT_EQ(p->inputs[1]->name, "b");
    EXPECT_EQ(kiln_ops::ProgramOperands(*p), 3);  // the concatenation, scale, shift
    // The output keeps the Concat's shape: [2, 24, 3, 3].
    EXPECT_EQ(StaticDims(*p->output(0)->shape), (std::vector<int64_t>{2, 24, 3, 3}));
  }
}

TEST(FuseConcatElementwise, LeavesOtherAxesOtherReadersAndFullShapeOperands) {
  Case second;
  second.second_reader = true;
  Case full;
  full.full_operand = true;
  for (const Case& k : {second, full}) {
    SCOPED_TRACE(k.second_reader ? "a second reader" : "a full-shape operand");
    auto g = ConcatProgram(k);
    EXPECT_FALSE(testing::RunPassAndCompare(*g, FuseConcatElementwise, kFeeds));
    EXPECT_EQ(CountOps(*g, "Concat"), 1);
    EXPECT_EQ(kiln_ops::ConcatInputs(*FindOp(*g, "FusedElementwise")), 0);
  }
  // Along H: Concat(a, a) [2, 16, 6, 3] -> Mul(per-channel) -> Relu.
  GraphBuilder b;
  Value* a = b.Input("a", DType::kFloat32, {2, 16, 3, 3});
  Value* cat = b.Op("Concat", {a, a}, {{"axis", Attribute::Int(2)}});
  Value* m = b.Op("Mul", {cat, b.Constant("s", SineRamp({1, 16, 1, 1}, 0.9, 0.5))});
  b.Output(b.Op("Relu", {m}));
  auto g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  ASSERT_TRUE(FuseElementwise(*g).ok());
  EXPECT_FALSE(testing::RunPassAndCompare(*g, FuseConcatElementwise, {{"a", kFeeds.at("a")}}));
  EXPECT_EQ(CountOps(*g, "Concat"), 1);
}

// The attribute's shape rule and the reference's program agree with a Concat written out,
// with the pieces at any position of the program's inputs.
TEST(FuseConcatElementwise, NegativeAxisAndThreePieces) {
  GraphBuilder b;
  Value* a = b.Input("a", DType::kFloat32, {2, 16, 3, 3});
  Value* bb = b.Input("b", DType::kFloat32, {2, 8, 3, 3});
  Value* c = b.Input("c", DType::kFloat32, {2, 24, 3, 3});
  Value* cat = b.Op("Concat", {c, a, bb}, {{"axis", Attribute::Int(-3)}});
  Value* s = b.Constant("s", SineRamp({48, 1, 1}, 0.9, 0.5));
  b.Output(b.Op("Sigmoid", {b.Op("Sub", {s, cat})}));
  auto g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  ASSERT_TRUE(FuseElementwise(*g).ok());
  EXPECT_TRUE(testing::RunPassAndCompare(*g, FuseConcatElementwise, kFeeds));
  const Node* p = FindOp(*g, "FusedElementwise");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(kiln_ops::ConcatInputs(*p), 3);
  EXPECT_EQ(p->inputs.size(), 4u);
}

}  // namespace
}  // namespace kiln::passes
