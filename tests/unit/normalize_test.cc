// Opset normalization: old-form nodes built by hand, rewritten into the opset-21 forms.
#include "compiler/onnx/normalize.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ir/verifier.h"
#include "ops/interpreter.h"
#include "tests/unit/normalize_util.h"

namespace kiln::onnx_io {
namespace {

using namespace normalize_test;  // NOLINT: the helpers shared with the other half

TEST(Normalize, SqueezeAxesAttributeBecomesInput) {
  OldGraph o(11);
  Value* x = o.Input("x", DType::kFloat32, Shape{1, 3, 1});
  Node* n = o.Op("Squeeze", {x}, {{"axes", Attribute::Ints({0, -1})}});
  Normalize(o.g);
  EXPECT_FALSE(n->HasAttr("axes"));
  ASSERT_EQ(n->inputs.size(), 2u);
  EXPECT_EQ(ConstInts(n->inputs[1]), (std::vector<int64_t>{0, -1}));
  EXPECT_EQ(n->inputs[1]->constant->shape(), (std::vector<int64_t>{2}));
  EXPECT_EQ(n->opset, 11);  // keeps the imported version
}

TEST(Normalize, SqueezeWithoutAxesStaysWithoutInput) {
  OldGraph o(1);
  Node* n = o.Op("Squeeze", {o.Input("x", DType::kFloat32, Shape{1, 3})}, {});
  Normalize(o.g);
  EXPECT_EQ(n->inputs.size(), 1u);
}

TEST(Normalize, UnsqueezeAndReducesTakeAxesInput) {
  OldGraph o(11);
  Value* x = o.Input("x", DType::kFloat32, Shape{2, 3});
  Node* u = o.Op("Unsqueeze", {x}, {{"axes", Attribute::Ints({0})}});
  Node* sum =
      o.Op("ReduceSum", {x}, {{"axes", Attribute::Ints({1})}, {"keepdims", Attribute::Int(0)}});
  Node* mean = o.Op("ReduceMean", {x}, {{"axes", Attribute::Ints({})}});
  Normalize(o.g);
  EXPECT_EQ(ConstInts(u->input(1)), (std::vector<int64_t>{0}));
  EXPECT_EQ(ConstInts(sum->input(1)), (std::vector<int64_t>{1}));
  EXPECT_EQ(sum->GetInt("keepdims", 1), 0);
  EXPECT_EQ(mean->input(1), nullptr);  // empty list: every axis, as an omitted input
  EXPECT_FALSE(mean->HasAttr("axes"));
}

TEST(Normalize, ReduceSum13AndReduceMean18AreLeftAlone) {
  OldGraph o(13);
  Value* x = o.Input("x", DType::kFloat32, Shape{2, 3});
  Node* sum = o.Op("ReduceSum", {x, nullptr}, {});
  Node* mean = o.Op("ReduceMean", {x}, {{"axes", Attribute::Ints({1})}});
  Normalize(o.g);
  EXPECT_EQ(sum->inputs.size(), 2u);
  EXPECT_EQ(ConstInts(mean->input(1)), (std::vector<int64_t>{1}));  // ReduceMean changed at 18
}

TEST(Normalize, SplitSizesBecomeInputOrNumOutputs) {
  OldGraph o(11);
  Value* x = o.Input("x", DType::kFloat32, Shape{6});
  Node* sized = o.Op("Split", {x}, {{"split", Attribute::Ints({2, 4})}}, 2);
  Node* equal = o.Op("Split", {x}, {{"axis", Attribute::Int(0)}}, 3);
  Normalize(o.g);
  EXPECT_EQ(ConstInts(sized->input(1)), (std::vector<int64_t>{2, 4}));
  EXPECT_FALSE(sized->HasAttr("num_outputs"));
  EXPECT_EQ(equal->input(1), nullptr);
  EXPECT_EQ(equal->GetInt("num_outputs", 0), 3);
}

TEST(Normalize, Split1FloatSizesInputBecomesInt64) {
  OldGraph o(1);
  Value* x = o.Input("x", DType::kFloat32, Shape{6});
  Value* sizes = o.g.AddConstant("sizes", Tensor::FromFloat({1, 5}, {2}));
  Node* n = o.Op("Split", {x, sizes}, {}, 2);
  Normalize(o.g);
  EXPECT_EQ(ConstInts(n->input(1)), (std::vector<int64_t>{1, 5}));
}

TEST(Normalize, ClipBoundsBecomeInputsOfTheInputType) {
  OldGraph o(6);
  Value* x = o.Input("x", DType::kFloat64, Shape{4});
  Node* n = o.Op("Clip", {x}, {{"max", Attribute::Float(6.0f)}});
  Normalize(o.g);
  ASSERT_EQ(n->inputs.size(), 3u);
  EXPECT_EQ(n->inputs[1], nullptr);  // no min: unbounded below
  ASSERT_TRUE(n->inputs[2]->is_constant());
  EXPECT_EQ(n->inputs[2]->constant->dtype(), DType::kFloat64);
  EXPECT_EQ(n->inputs[2]->constant->rank(), 0);
  EXPECT_EQ(n->inputs[2]->constant->GetDouble(0), 6.0);
  EXPECT_FALSE(n->HasAttr("max"));
}

TEST(Normalize, ClipOfUntypedIntermediateUsesCastLike) {
  OldGraph o(6);
  Value* x = o.Input("x", DType::kFloat32, Shape{4});
  Node* relu = o.Op("Relu", {x}, {});
  Node* clip = o.Op("Clip", {relu->outputs[0]},
                    {{"min", Attribute::Float(0)}, {"max", Attribute::Float(1)}});
  o.g.outputs = {clip->outputs[0]};
  Normalize(o.g);
  EXPECT_EQ(Count(o.g, "CastLike"), 2);
  ASSERT_NE(clip->input(1), nullptr);
  ASSERT_NE(clip->input(1)->producer, nullptr);
  EXPECT_EQ(clip->input(1)->producer->op_type, "CastLike");
  EXPECT_EQ(clip->input(1)->producer->inputs[1], relu->outputs[0]);
}

TEST(Normalize, PadAttributesBecomeInputs) {
  OldGraph o(2);
  Value* x = o.Input("x", DType::kFloat32, Shape{2, 2});
  Node* n = o.Op("Pad", {x},
                 {{"pads", Attribute::Ints({0, 1, 0, 2})},
                  {"value", Attribute::Float(1.5f)},
                  {"mode", Attribute::String("constant")}});
  Normalize(o.g);
  EXPECT_EQ(ConstInts(n->input(1)), (std::vector<int64_t>{0, 1, 0, 2}));
  ASSERT_NE(n->input(2), nullptr);
  EXPECT_EQ(n->input(2)->constant->GetDouble(0), 1.5);
  EXPECT_EQ(n->GetString("mode", ""), "constant");
  EXPECT_FALSE(n->HasAttr("pads") || n->HasAttr("value"));
}

TEST(Normalize, Pad1PaddingsAndZeroValue) {
  OldGraph o(1);
  Value* x = o.Input("x", DType::kFloat32, Shape{2, 2});
  Node* n = o.Op("Pad", {x},
                 {{"paddings", Attribute::Ints({1, 0, 1, 0})}, {"value", Attribute::Float(0)}});
  Normalize(o.g);
  EXPECT_EQ(ConstInts(n->input(1)), (std::vector<int64_t>{1, 0, 1, 0}));
  EXPECT_EQ(n->inputs.size(), 2u);  // zero is the default constant_value
  EXPECT_FALSE(n->HasAttr("paddings"));
}

TEST(Normalize, SliceTopKReshapeAttributesBecomeInputs) {
  OldGraph o(1);
  Value* x = o.Input("x", DType::kFloat32, Shape{4, 5});
  Node* slice = o.Op("Slice", {x},
                     {{"starts", Attribute::Ints({1})},
                      {"ends", Attribute::Ints({3})},
                      {"axes", Attribute::Ints({1})}});
  Node* topk = o.Op("TopK", {x}, {{"k", Attribute::Int(2)}}, 2);
  Node* reshape =
      o.Op("Reshape", {x},
           {{"shape", Attribute::Ints({20})}, {"consumed_inputs", Attribute::Ints({0})}});
  Normalize(o.g);
  EXPECT_EQ(ConstInts(slice->input(1)), (std::vector<int64_t>{1}));
  EXPECT_EQ(ConstInts(slice->input(2)), (std::vector<int64_t>{3}));
  EXPECT_EQ(ConstInts(slice->input(3)), (std::vector<int64_t>{1}));
  EXPECT_TRUE(slice->attrs.empty());
  EXPECT_EQ(ConstInts(topk->input(1)), (std::vector<int64_t>{2}));
  EXPECT_EQ(topk->input(1)->constant->shape(), (std::vector<int64_t>{1}));
  EXPECT_EQ(ConstInts(reshape->input(1)), (std::vector<int64_t>{20}));
  EXPECT_TRUE(reshape->attrs.empty());
}

TEST(Normalize, DropoutRatioBecomesInputAndMaskKeepsItsType) {
  OldGraph o(7);
  Value* x = o.Input("x", DType::kFloat32, Shape{4});
  Node* n = o.Op("Dropout", {x}, {{"ratio", Attribute::Float(0.25f)}}, 2);
  Value* mask = n->outputs[1];
  o.g.outputs.push_back(mask);
  Normalize(o.g);
  ASSERT_NE(n->input(1), nullptr);
  EXPECT_FLOAT_EQ(n->input(1)->constant->GetDouble(0), 0.25);
  EXPECT_FALSE(n->HasAttr("ratio"));
  ASSERT_NE(mask->producer, nullptr);
  EXPECT_EQ(mask->producer->op_type, "CastLike");  // bool mask back to the data type
  EXPECT_EQ(mask->producer->inputs[0], n->outputs[1]);
}

TEST(Normalize, DropoutLegacyAttributesAndUnusedMaskAreDropped) {
  OldGraph o(6);
  Value* x = o.Input("x", DType::kFloat32, Shape{4});
  Node* n = o.Op("Dropout", {x}, {{"is_test", Attribute::Int(1)}}, 2);
  Normalize(o.g);
  EXPECT_TRUE(n->attrs.empty());
  EXPECT_EQ(n->outputs.size(), 1u);
}

TEST(Normalize, BatchNormLegacyAttributesAndOutputs) {
  OldGraph o(6);
  Value* x = o.Input("x", DType::kFloat32, Shape{1, 2, 3, 3});
  std::vector<Value*> ins = {x};
  for (const char* p : {"s", "b", "m", "v"}) {
    ins.push_back(o.g.AddConstant(p, Tensor::FromFloat({1, 1}, {2})));
  }
  Node* n = o.Op("BatchNormalization", ins,
                 {{"is_test", Attribute::Int(1)},
                  {"spatial", Attribute::Int(1)},
                  {"momentum", Attribute::Float(0.9f)},
                  {"consumed_inputs", Attribute::Ints({0, 0, 0, 1, 1})}},
                 5);
  Normalize(o.g);
  EXPECT_EQ(n->outputs.size(), 1u);
  EXPECT_EQ(n->attrs.size(), 1u);
  EXPECT_FLOAT_EQ(n->GetFloat("momentum", 0), 0.9f);
}

TEST(Normalize, BatchNormPerActivationIsDecomposed) {
  OldGraph o(7);
  Value* x = o.Input("x", DType::kFloat32, Shape{2, 2, 1});
  std::vector<Value*> ins = {x};
  for (const char* p : {"s", "b", "m", "v"}) {
    ins.push_back(o.g.AddConstant(p, Tensor::FromFloat({1, 2}, {2, 1})));
  }
  Node* n = o.Op("BatchNormalization", ins, {{"spatial", Attribute::Int(0)}});
  Normalize(o.g);
  EXPECT_EQ(n->op_type, "Add");
  EXPECT_EQ(Count(o.g, "Sqrt"), 1);
  EXPECT_EQ(Count(o.g, "BatchNormalization"), 0);
}

TEST(Normalize, BatchNormSavedStatisticsAreUnimplemented) {
  OldGraph o(9);
  Value* x = o.Input("x", DType::kFloat32, Shape{1, 2});
  std::vector<Value*> ins = {x};
  for (const char* p : {"s", "b", "m", "v"}) {
    ins.push_back(o.g.AddConstant(p, Tensor::FromFloat({1, 1}, {2})));
  }
  Node* n = o.Op("BatchNormalization", ins, {}, 5);
  o.g.outputs.push_back(n->outputs[3]);
  absl::Status st = NormalizeOperators(o.g);
  EXPECT_TRUE(absl::IsUnimplemented(st)) << st;
  EXPECT_NE(st.message().find("BatchNormalization_node"), std::string::npos) << st;
  EXPECT_NE(st.message().find("opset 9"), std::string::npos) << st;
}

}  // namespace
}  // namespace kiln::onnx_io
