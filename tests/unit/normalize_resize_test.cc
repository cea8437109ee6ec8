// Opset normalization, second half: Upsample/Resize, Softmax-11, GroupNorm-18, Cast-1 and the
// legacy broadcast forms, rewritten into the opset-21 forms.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler/onnx/normalize.h"
#include "ir/verifier.h"
#include "ops/interpreter.h"
#include "tests/unit/normalize_util.h"

namespace kiln::onnx_io {
namespace {

using namespace normalize_test;  // NOLINT: the helpers shared with the other half

TEST(Normalize, UpsampleBecomesAsymmetricResize) {
  OldGraph o(7);
  Value* x = o.Input("x", DType::kFloat32, Shape{1, 1, 2, 2});
  Node* n = o.Op("Upsample", {x}, {{"scales", Attribute::Floats({1, 1, 2, 3})}});
  Normalize(o.g);
  EXPECT_EQ(n->op_type, "Resize");
  ASSERT_EQ(n->inputs.size(), 3u);
  EXPECT_EQ(n->inputs[1], nullptr);
  EXPECT_EQ(n->inputs[2]->constant->ToDoubleVector(), (std::vector<double>{1, 1, 2, 3}));
  EXPECT_EQ(n->GetString("coordinate_transformation_mode", ""), "asymmetric");
  EXPECT_EQ(n->GetString("nearest_mode", ""), "floor");
  EXPECT_EQ(n->GetString("mode", ""), "nearest");
  EXPECT_FALSE(n->HasAttr("scales"));
}

TEST(Normalize, Upsample1BilinearBecomesLinearResize) {
  OldGraph o(1);
  Value* x = o.Input("x", DType::kFloat32, Shape{1, 1, 2, 2});
  Node* n = o.Op("Upsample", {x},
                 {{"mode", Attribute::String("bilinear")},
                  {"height_scale", Attribute::Float(2)},
                  {"width_scale", Attribute::Float(3)}});
  Normalize(o.g);
  EXPECT_EQ(n->GetString("mode", ""), "linear");
  EXPECT_FALSE(n->HasAttr("nearest_mode"));
  EXPECT_EQ(n->inputs[2]->constant->ToDoubleVector(), (std::vector<double>{1, 1, 2, 3}));
}

TEST(Normalize, Resize10NearestRoundsLikeResize10) {
  OldGraph o(10);
  Value* x = o.Input("x", DType::kFloat32, Shape{1, 1, 4, 4});
  Value* up = o.g.AddConstant("up", Tensor::FromFloat({1, 1, 2, 2}, {4}));
  Value* down = o.g.AddConstant("down", Tensor::FromFloat({1, 1, 0.6f, 0.6f}, {4}));
  Node* a = o.Op("Resize", {x, up}, {});
  Node* b = o.Op("Resize", {x, down}, {});
  Node* c = o.Op("Resize", {x, up}, {{"mode", Attribute::String("linear")}});
  Normalize(o.g);
  EXPECT_EQ(a->inputs.size(), 3u);
  EXPECT_EQ(a->inputs[1], nullptr);
  EXPECT_EQ(a->inputs[2], up);
  EXPECT_EQ(a->GetString("coordinate_transformation_mode", ""), "asymmetric");
  EXPECT_EQ(a->GetString("nearest_mode", ""), "floor");
  EXPECT_EQ(b->GetString("nearest_mode", ""), "ceil");
  EXPECT_EQ(c->GetString("coordinate_transformation_mode", ""), "asymmetric");
  EXPECT_FALSE(c->HasAttr("nearest_mode"));
}

TEST(Normalize, Resize10MixedScalesSplitIntoTwoResizes) {
  OldGraph o(10);
  Value* x = o.Input("x", DType::kFloat32, Shape{1, 1, 4, 4});
  Value* s = o.g.AddConstant("s", Tensor::FromFloat({1, 1, 0.5f, 2}, {4}));
  Node* n = o.Op("Resize", {x, s}, {});
  Value* y = n->outputs[0];
  Normalize(o.g);
  ASSERT_EQ(Count(o.g, "Resize"), 2);
  EXPECT_EQ(n->GetString("nearest_mode", ""), "ceil");
  EXPECT_EQ(n->inputs[2]->constant->ToDoubleVector(), (std::vector<double>{1, 1, 0.5, 1}));
  ASSERT_NE(y->producer, n);
  EXPECT_EQ(y->producer->GetString("nearest_mode", ""), "floor");
  EXPECT_EQ(y->producer->inputs[0], n->outputs[0]);
  EXPECT_EQ(y->producer->inputs[2]->constant->ToDoubleVector(), (std::vector<double>{1, 1, 1, 2}));
}

TEST(Normalize, Resize11TfHalfPixelForNn) {
  OldGraph o(11);
  Value* x = o.Input("x", DType::kFloat32, Shape{1, 1, 4, 4});
  Value* roi = o.g.AddConstant("roi", Tensor::FromFloat({}, {0}));
  Value* scales = o.g.AddConstant("scales", Tensor::FromFloat({}, {0}));
  Value* sizes = o.g.AddConstant("sizes", Tensor::FromInt64({1, 1, 8, 8}, {4}));
  Node* n = o.Op("Resize", {x, roi, scales, sizes},
                 {{"coordinate_transformation_mode", Attribute::String("tf_half_pixel_for_nn")},
                  {"nearest_mode", Attribute::String("floor")}});
  Normalize(o.g);
  EXPECT_EQ(n->GetString("coordinate_transformation_mode", ""), "half_pixel");
  EXPECT_EQ(n->GetString("nearest_mode", ""), "round_prefer_ceil");
  EXPECT_EQ(n->inputs[1], nullptr);  // roi unused outside tf_crop_and_resize
  EXPECT_EQ(n->inputs[2], nullptr);  // empty scales: sizes decide
  EXPECT_EQ(n->inputs[3], sizes);
}

TEST(Normalize, UnconvertibleResizeIsUnimplementedNamingTheNode) {
  OldGraph o(11);
  Value* x = o.Input("x", DType::kFloat32, Shape{1, 1, 4, 4});
  Value* roi = o.g.AddConstant("roi", Tensor::FromFloat({}, {0}));
  Value* scales = o.g.AddConstant("scales", Tensor::FromFloat({1, 1, 2, 2}, {4}));
  o.Op("Resize", {x, roi, scales},
       {{"coordinate_transformation_mode", Attribute::String("tf_half_pixel_for_nn")},
        {"mode", Attribute::String("linear")}});
  absl::Status st = NormalizeOperators(o.g);
  EXPECT_TRUE(absl::IsUnimplemented(st)) << st;
  EXPECT_NE(st.message().find("Resize 'Resize_node' (opset 11)"), std::string::npos) << st;
}

TEST(Normalize, UnknownUpsampleModeIsUnimplemented) {
  OldGraph o(9);
  Value* x = o.Input("x", DType::kFloat32, Shape{1, 1, 4, 4});
  Value* s = o.g.AddConstant("s", Tensor::FromFloat({1, 1, 2, 2}, {4}));
  o.Op("Upsample", {x, s}, {{"mode", Attribute::String("cubic")}});
  EXPECT_TRUE(absl::IsUnimplemented(NormalizeOperators(o.g)));
}

TEST(Normalize, Softmax11OnInnerAxisBecomesFlattenSoftmaxReshape) {
  OldGraph o(11);
  Value* x = o.Input("x", DType::kFloat32, Shape{2, 2, 2});
  Node* n = o.Op("Softmax", {x}, {});  // default axis 1: rows of 4 values
  Value* y = n->outputs[0];
  Normalize(o.g);
  EXPECT_EQ(n->GetInt("axis", 0), -1);
  ASSERT_NE(n->inputs[0]->producer, nullptr);
  EXPECT_EQ(n->inputs[0]->producer->op_type, "Flatten");
  EXPECT_EQ(n->inputs[0]->producer->GetInt("axis", 0), 1);
  ASSERT_NE(y->producer, nullptr);
  EXPECT_EQ(y->producer->op_type, "Reshape");
  EXPECT_EQ(y->producer->inputs[1]->producer->op_type, "Shape");

  // Numbers, when the kernels are there: each batch row of 4 sums to 1.
  Tensor in(DType::kFloat32, {2, 2, 2});
  for (int i = 0; i < 8; ++i) in.SetDouble(i, i % 4);
  auto out = ref::Run(o.g, {{"x", in}});
  if (absl::IsUnimplemented(out.status())) GTEST_SKIP() << out.status();
  ASSERT_TRUE(out.ok()) << out.status();
  const Tensor& t = out->at(y->name);
  ASSERT_EQ(t.shape(), (std::vector<int64_t>{2, 2, 2}));
  const double denom = 1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(t.GetDouble(i), std::exp(i % 4) / denom, 1e-6);
}

TEST(Normalize, Softmax11OnLastAxisOnlySetsAxis) {
  OldGraph o(11);
  Value* x = o.Input("x", DType::kFloat32, Shape{2, 5});
  Node* n = o.Op("LogSoftmax", {x}, {{"axis", Attribute::Int(1)}});
  Normalize(o.g);
  EXPECT_EQ(o.g.nodes().size(), 1u);
  EXPECT_EQ(n->GetInt("axis", 0), -1);
}

TEST(Normalize, GroupNorm18ConstantsArePerChannel) {
  OldGraph o(18);
  Value* x = o.Input("x", DType::kFloat32, Shape{1, 4, 2});
  Value* s = o.g.AddConstant("s", Tensor::FromFloat({1, 2}, {2}));
  Value* b = o.g.AddConstant("b", Tensor::FromFloat({3, 4}, {2}));
  Node* n = o.Op("GroupNormalization", {x, s, b}, {{"num_groups", Attribute::Int(2)}});
  Normalize(o.g);
  EXPECT_EQ(n->inputs[1]->constant->ToDoubleVector(), (std::vector<double>{1, 1, 2, 2}));
  EXPECT_EQ(n->inputs[2]->constant->ToDoubleVector(), (std::vector<double>{3, 3, 4, 4}));
}

TEST(Normalize, GroupNorm18DynamicScaleIsExpanded) {
  OldGraph o(18);
  Value* x = o.Input("x", DType::kFloat32, Shape{1, Dim::Symbol("C"), 2});
  Value* s = o.Input("s", DType::kFloat32, Shape{2});
  Value* b = o.Input("b", DType::kFloat32, Shape{2});
  Node* n = o.Op("GroupNormalization", {x, s, b}, {{"num_groups", Attribute::Int(2)}});
  Normalize(o.g);
  ASSERT_NE(n->inputs[1]->producer, nullptr);
  EXPECT_EQ(n->inputs[1]->producer->op_type, "Reshape");
  EXPECT_EQ(Count(o.g, "Expand"), 2);
}

TEST(Normalize, Cast1StringTargetBecomesNumber) {
  OldGraph o(1);
  Node* n =
      o.Op("Cast", {o.Input("x", DType::kInt32, Shape{2})}, {{"to", Attribute::String("FLOAT")}});
  Normalize(o.g);
  const Attribute* to = n->FindAttr("to");
  ASSERT_NE(to, nullptr);
  EXPECT_EQ(to->kind, Attribute::Kind::kInt);
  EXPECT_EQ(to->i, static_cast<int64_t>(DType::kFloat32));
}

TEST(Normalize, LegacyBroadcastWithAxisReshapesConstantB) {
  OldGraph o(6);
  Value* a = o.Input("a", DType::kFloat32, Shape{2, 3, 4, 5});
  Value* b = o.g.AddConstant("b", Tensor::FromFloat(std::vector<float>(12, 1.0f), {3, 4}));
  Node* n = o.Op("Add", {a, b}, {{"broadcast", Attribute::Int(1)}, {"axis", Attribute::Int(1)}});
  Normalize(o.g);
  EXPECT_TRUE(n->attrs.empty());
  ASSERT_TRUE(n->inputs[1]->is_constant());
  EXPECT_EQ(n->inputs[1]->constant->shape(), (std::vector<int64_t>{3, 4, 1}));
}

TEST(Normalize, LegacyBroadcastOnUnknownRankIsComputedInGraph) {
  OldGraph o(6);
  Value* a = o.Input("a", DType::kFloat32, Shape{2, 3, 2, 2});
  Node* relu = o.Op("Relu", {a}, {});  // its output's rank is unknown at import
  Value* b = o.g.AddConstant("b", Tensor::FromFloat({1, 2, 3}, {3}));
  Node* n = o.Op("Mul", {relu->outputs[0], b},
                 {{"broadcast", Attribute::Int(1)}, {"axis", Attribute::Int(1)}});
  o.g.outputs = {n->outputs[0]};
  Normalize(o.g);
  ASSERT_NE(n->inputs[1]->producer, nullptr);
  EXPECT_EQ(n->inputs[1]->producer->op_type, "Reshape");

  Tensor in(DType::kFloat32, {2, 3, 2, 2});
  for (int64_t i = 0; i < in.numel(); ++i) in.SetDouble(i, 1.0);
  auto out = ref::Run(o.g, {{"a", in}});
  if (absl::IsUnimplemented(out.status())) GTEST_SKIP() << out.status();
  ASSERT_TRUE(out.ok()) << out.status();
  const Tensor& t = out->at(n->outputs[0]->name);
  ASSERT_EQ(t.shape(), (std::vector<int64_t>{2, 3, 2, 2}));
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.GetDouble(i), (i / 4) % 3 + 1) << i;
}

TEST(Normalize, LegacyBroadcastSuffixAndGemmJustDropAttributes) {
  OldGraph o(6);
  Value* a = o.Input("a", DType::kFloat32, Shape{2, 3});
  Value* c = o.g.AddConstant("c", Tensor::FromFloat({1, 2, 3}, {3}));
  Node* sub = o.Op("Sub", {a, c}, {{"broadcast", Attribute::Int(1)}});
  Node* gemm = o.Op("Gemm", {a, o.Input("w", DType::kFloat32, Shape{3, 3}), c},
                    {{"broadcast", Attribute::Int(1)}, {"transB", Attribute::Int(1)}});
  Normalize(o.g);
  EXPECT_TRUE(sub->attrs.empty());
  EXPECT_EQ(sub->inputs[1], c);
  EXPECT_EQ(gemm->attrs.size(), 1u);
  EXPECT_EQ(gemm->GetInt("transB", 0), 1);
}

TEST(Normalize, ConcatScatterTileLegacyForms) {
  OldGraph o(1);
  Value* x = o.Input("x", DType::kFloat32, Shape{2, 3});
  Node* concat = o.Op("Concat", {x, x}, {});
  Value* tiles = o.g.AddConstant("tiles", Tensor::FromInt64({3}, {}));
  Value* axis = o.g.AddConstant("axis", Tensor::FromInt64({-1}, {}));
  Node* tile = o.Op("Tile", {x, tiles, axis}, {});
  Normalize(o.g);
  EXPECT_EQ(concat->GetInt("axis", 0), 1);
  ASSERT_EQ(tile->inputs.size(), 2u);
  EXPECT_EQ(ConstInts(tile->inputs[1]), (std::vector<int64_t>{1, 3}));

  OldGraph s(9);
  Value* d = s.Input("d", DType::kFloat32, Shape{3});
  Value* i = s.Input("i", DType::kInt64, Shape{1});
  Node* scatter = s.Op("Scatter", {d, i, d}, {{"axis", Attribute::Int(0)}});
  Normalize(s.g);
  EXPECT_EQ(scatter->op_type, "ScatterElements");
}

TEST(Normalize, DynamicTile1IsUnimplemented) {
  OldGraph o(1);
  Value* x = o.Input("x", DType::kFloat32, Shape{2, 3});
  o.Op("Tile", {x, o.Input("t", DType::kInt64, Shape{}), o.Input("a", DType::kInt64, Shape{})}, {});
  EXPECT_TRUE(absl::IsUnimplemented(NormalizeOperators(o.g)));
}

TEST(Normalize, NewestFormsAndOtherDomainsAreUntouched) {
  OldGraph o(21);
  o.g.opsets[kKilnDomain] = 1;
  Value* x = o.Input("x", DType::kFloat32, Shape{2, 3});
  Node* softmax = o.Op("Softmax", {x}, {{"axis", Attribute::Int(0)}});
  Node* kiln = o.Op("FusedThing", {x}, {{"axes", Attribute::Ints({1})}});
  kiln->domain = kKilnDomain;
  Normalize(o.g);
  EXPECT_EQ(softmax->GetInt("axis", 5), 0);
  EXPECT_EQ(o.g.nodes().size(), 2u);
  EXPECT_TRUE(kiln->HasAttr("axes"));
}

TEST(Normalize, ModelWithoutOnnxOpsetIsRejected) {
  OldGraph o(0);
  o.Op("Relu", {o.Input("x", DType::kFloat32, Shape{2})}, {});
  EXPECT_TRUE(absl::IsInvalidArgument(NormalizeOperators(o.g)));
}

}  // namespace
}  // namespace kiln::onnx_io
