// Shape classes (server/model/padding.h, server/model/padding_proof.h): the class ladder, rounding
// a request up to its class, padding and cutting tensors, and the proof that decides whether a
// model may be served padded: a masked attention passes, a softmax over the padded dim and an
// output that grows as `sequence + 1` are refused, and the model built with classes serves
// every size of its range from engines built at load, matching the reference.
#include <gtest/gtest.h>

#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ops/interpreter.h"
#include "server/model/model_builder.h"
#include "server/model/padding.h"
#include "server/model/padding_proof.h"
#include "server/serving/shape_engines.h"

namespace kiln::server {
namespace {

TEST(ShapeClasses, TheLadderStepsByAtMostHalfAndKeepsTheEndsAndTheTypicalSize) {
  EXPECT_EQ(ClassLadder(1, 512, 128),
            (std::vector<int64_t>{1, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512}));
  EXPECT_EQ(ClassLadder(1, 512, 100, /*coarse=*/true),
            (std::vector<int64_t>{1, 16, 32, 64, 100, 128, 256, 512}));
  EXPECT_EQ(ClassLadder(1, 10, 4), (std::vector<int64_t>{1, 4, 10}));
  // A range from 0 (a decoder's empty cache): 0 pads to the first class, none is built at 0.
  EXPECT_EQ(ClassLadder(0, 10, 4), (std::vector<int64_t>{1, 4, 10}));
  EXPECT_EQ(ClassLadder(40, 70, 50), (std::vector<int64_t>{40, 48, 50, 64, 70}));
}

TEST(ShapeClasses, ARequestRoundsUpToItsClassAndNothingAboveTheLast) {
  const ShapeClasses classes{{"sequence", {16, 24, 32}}};
  EXPECT_EQ(*ClassOf(classes, {{"sequence", 1}}), (DimValues{{"sequence", 16}}));
  EXPECT_EQ(*ClassOf(classes, {{"sequence", 17}}), (DimValues{{"sequence", 24}}));
  EXPECT_EQ(*ClassOf(classes, {{"sequence", 24}}), (DimValues{{"sequence", 24}}));
  EXPECT_EQ(*ClassOf(classes, {{"sequence", 5}, {"other", 3}}),
            (DimValues{{"sequence", 16}, {"other", 3}}));
  EXPECT_EQ(ClassOf(classes, {{"sequence", 33}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AllClasses({{"a", {1, 2}}, {"b", {3, 4}}}).size(), 4u);
}

TEST(ShapeClasses, PaddingAddsZerosAndCuttingKeepsThePrefix) {
  Tensor t(DType::kInt32, {2, 3});
  for (int i = 0; i < 6; ++i) t.mutable_data<int32_t>()[i] = i + 1;  // [[1 2 3] [4 5 6]]
  auto padded = ResizeToDims({t}, {{"", "sequence"}}, {{"sequence", 3}}, {{"sequence", 5}});
  ASSERT_TRUE(padded.ok()) << padded.status();
  const Tensor& p = (*padded)[0];
  EXPECT_EQ(p.shape(), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(p.ToInt64Vector(), (std::vector<int64_t>{1, 2, 3, 0, 0, 4, 5, 6, 0, 0}));
  auto cut = ResizeToDims(*padded, {{"", "sequence"}}, {{"sequence", 5}}, {{"sequence", 2}});
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ((*cut)[0].ToInt64Vector(), (std::vector<int64_t>{1, 2, 4, 5}));
  // A tensor without the symbol, and a symbol not asked for, stay as they are.
  auto same = ResizeToDims({t}, {{"", "other"}}, {{"sequence", 3}}, {{"sequence", 5}});
  EXPECT_EQ((*same)[0].shape(), t.shape());
}

// A dim that is a sum ("past + sequence") is one region per term, each padded at its own end:
// [p0 p1 | s0] with past 2 -> 3 and sequence 1 -> 2 becomes [p0 p1 0 | s0 0], and back.
TEST(ShapeClasses, ASumDimPadsAndCutsEachOfItsRegions) {
  Tensor mask(DType::kInt64, {1, 3});
  for (int i = 0; i < 3; ++i) mask.mutable_data<int64_t>()[i] = 7 + i;  // p0 p1 s0 = 7 8 9
  const DimSymbols labels{{"", "past + sequence"}};
  const DimValues real{{"past", 2}, {"sequence", 1}}, cls{{"past", 3}, {"sequence", 2}};
  auto padded = ResizeToDims({mask}, labels, real, cls);
  ASSERT_TRUE(padded.ok()) << padded.status();
  EXPECT_EQ((*padded)[0].ToInt64Vector(), (std::vector<int64_t>{7, 8, 0, 9, 0}));
  auto back = ResizeToDims(*padded, labels, cls, real);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ((*back)[0].ToInt64Vector(), (std::vector<int64_t>{7, 8, 9}));
  // "past + 1": the constant region moves with the past's end.
  auto plus_one = ResizeToDims({mask}, {{"", "past + 1"}}, real, cls);
  ASSERT_TRUE(plus_one.ok());
  EXPECT_EQ((*plus_one)[0].ToInt64Vector(), (std::vector<int64_t>{7, 8, 0, 9}));
  // A size its terms do not make is refused, as is a term without a size.
  EXPECT_FALSE(ResizeToDims({mask}, labels, {{"past", 1}, {"sequence", 1}}, cls).ok());
  EXPECT_FALSE(ResizeToDims({mask}, {{"", "past + other"}}, real, cls).ok());
}

Tensor Filled(std::vector<int64_t> shape, float v) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = v * ((i * 7) % 13 - 6);
  return t;
}

enum class Kind { kMasked, kUnmasked, kGrowing };

// x[batch, sequence, 4], mask[batch, sequence] -> self-attention scores x x^T plus the
// additive mask (1 - mask) * -10000 (kMasked; kUnmasked leaves the mask out), softmax over
// the keys, times x: y[batch, sequence, 4]. kGrowing also appends a row to y (sequence + 1).
std::unique_ptr<Graph> Attention(Kind kind) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32,
                     {Dim::Symbol("batch"), Dim::Symbol("sequence"), Dim(4)});
  Value* mask = b.Input("mask", DType::kInt64, {Dim::Symbol("batch"), Dim::Symbol("sequence")});
  Value* xt = b.Op("Transpose", {x}, {{"perm", Attribute::Ints({0, 2, 1})}});
  Value* scores = b.Op("MatMul", {b.Op("MatMul", {x, b.Constant("w", Filled({4, 4}, 0.1f))}), xt});
  Value* m = b.Op("Cast", {b.Op("Unsqueeze", {mask, b.Constant("ax", Tensor::FromInt64({1}, {1}))})},
                  {{"to", Attribute::Int(1)}});  // ONNX FLOAT
  Value* additive = b.Op("Mul", {b.Op("Sub", {b.Constant("one", Tensor::FromFloat({1.f})), m}),
                                 b.Constant("big", Tensor::FromFloat({-10000.f}))});
  if (kind != Kind::kUnmasked) scores = b.Op("Add", {scores, additive});
  Value* y = b.Op("MatMul", {b.Op("Softmax", {scores}, {{"axis", Attribute::Int(-1)}}), x});
  if (kind == Kind::kGrowing) {
    y = b.Op("Concat", {y, b.Op("Slice", {y, b.Constant("s0", Tensor::FromInt64({0}, {1})),
                                          b.Constant("s1", Tensor::FromInt64({1}, {1})),
                                          b.Constant("s2", Tensor::FromInt64({1}, {1}))})},
             {{"axis", Attribute::Int(1)}});
  }
  b.Output(y);
  return b.Build();
}

ModelConfig Classes(int64_t max) {
  ModelConfig c;
  c.max_batch_size = 2;
  c.device = "cpu";
  c.dynamic_dims = {{"sequence", 8}};
  c.dynamic_dim_ranges = {{"sequence", {1, max}}};
  EXPECT_TRUE(FinalizeModelConfig(c).ok());
  return c;
}

TEST(PaddingProof, AMaskedAttentionMayBePadded) {
  auto built = BuildModel(*Attention(Kind::kMasked), Classes(40), nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  ASSERT_TRUE(built->padding.has_value()) << built->padding_refused;
  EXPECT_EQ(built->padding->classes.at("sequence"), (std::vector<int64_t>{1, 8, 16, 24, 32, 40}));
  EXPECT_EQ(built->padding->inputs, (DimSymbols{{"", "sequence", ""}, {"", "sequence"}}));
  EXPECT_EQ(built->padding->outputs, (DimSymbols{{"", "sequence", ""}}));
  EXPECT_NE(built->padding->ToString().find("sequence: 1 8 16 24 32 40"), std::string::npos);
}

TEST(PaddingProof, ClassesTheConfigGivesReplaceTheLadder) {
  ModelConfig c = Classes(40);
  c.dynamic_dim_classes = {{"sequence", {4, 40}}};
  auto built = BuildModel(*Attention(Kind::kMasked), c, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  ASSERT_TRUE(built->padding.has_value()) << built->padding_refused;
  EXPECT_EQ(built->padding->classes.at("sequence"), (std::vector<int64_t>{4, 40}));
  // Classes that do not end at the range's max leave sizes unserved: refused, saying why.
  c.dynamic_dim_classes = {{"sequence", {4, 32}}};
  auto short_classes = BuildModel(*Attention(Kind::kMasked), c, nullptr);
  ASSERT_TRUE(short_classes.ok()) << short_classes.status();
  EXPECT_FALSE(short_classes->padding.has_value());
  EXPECT_NE(short_classes->padding_refused.find("classes must lie in the range"), std::string::npos)
      << short_classes->padding_refused;
}

TEST(PaddingProof, OutputsThatMoveWithThePaddingAreRefused) {
  // Without the mask every key is attended, the padded ones too.
  auto unmasked = BuildModel(*Attention(Kind::kUnmasked), Classes(40), nullptr);
  ASSERT_TRUE(unmasked.ok()) << unmasked.status();
  EXPECT_FALSE(unmasked->padding.has_value());
  EXPECT_NE(unmasked->padding_refused.find("move when the inputs are zero-padded"),
            std::string::npos)
      << unmasked->padding_refused;
  auto growing = BuildModel(*Attention(Kind::kGrowing), Classes(40), nullptr);
  ASSERT_TRUE(growing.ok()) << growing.status();
  EXPECT_FALSE(growing->padding.has_value());
  EXPECT_NE(growing->padding_refused.find("cannot be cut out"), std::string::npos)
      << growing->padding_refused;
  // A range beyond kMaxClassSize keeps per-shape engines (its classes would cost too much).
  auto long_range = BuildModel(*Attention(Kind::kMasked), Classes(kMaxClassSize + 1), nullptr);
  ASSERT_TRUE(long_range.ok()) << long_range.status();
  EXPECT_FALSE(long_range->padding.has_value());
  EXPECT_NE(long_range->padding_refused.find("above the 1024 positions"), std::string::npos)
      << long_range->padding_refused;
  ModelConfig off = Classes(40);
  off.shape_classes = "off";
  auto not_asked = BuildModel(*Attention(Kind::kMasked), off, nullptr);
  ASSERT_TRUE(not_asked.ok());
  EXPECT_FALSE(not_asked->padding.has_value());
  EXPECT_TRUE(not_asked->padding_refused.empty());
}

// Every size of the range, padded to its class's engine (built with BuildShapeEngine, as the
// server does at load) and cut back, against the reference at the request's own size.
TEST(PaddingProof, EverySizeServedPaddedMatchesTheReference) {
  auto model = Attention(Kind::kMasked);
  auto built = BuildModel(*model, Classes(40), nullptr);
  ASSERT_TRUE(built.ok() && built->padding) << built.status();
  for (int64_t seq : {1, 7, 9, 23, 33, 40}) {
    const DimValues cls = *ClassOf(built->padding->classes, {{"sequence", seq}});
    auto engine = BuildShapeEngine(*model, Classes(40), *built, cls, 2, /*check=*/false);
    ASSERT_TRUE(engine.ok()) << engine.status();
    Tensor x = Filled({2, seq, 4}, 0.3f), mask(DType::kInt64, {2, seq});
    for (int64_t i = 0; i < mask.numel(); ++i) mask.mutable_data<int64_t>()[i] = 1;
    mask.mutable_data<int64_t>()[0] = seq > 1 ? 0 : 1;  // the client's own masking stays
    auto padded = ResizeToDims({x, mask}, built->padding->inputs, {{"sequence", seq}}, cls);
    ASSERT_TRUE(padded.ok());
    std::vector<Tensor> out;
    ASSERT_TRUE((*engine)->Run(*padded, out).ok());
    auto cut = ResizeToDims(out, built->padding->outputs, cls, {{"sequence", seq}});
    ASSERT_TRUE(cut.ok());
    std::unique_ptr<Graph> exact = model->Clone();
    ASSERT_TRUE(shape::Specialize(*exact, 2, {{"sequence", seq}}).ok());
    auto want = ref::Run(*exact, {{"x", x}, {"mask", mask}});
    ASSERT_TRUE(want.ok()) << want.status();
    const Tensor& w = want->begin()->second;
    ASSERT_EQ((*cut)[0].shape(), w.shape()) << seq;
    for (int64_t i = 0; i < w.numel(); ++i) {
      ASSERT_NEAR((*cut)[0].data<float>()[i], w.data<float>()[i], 1e-4) << seq << " at " << i;
    }
  }
}

}  // namespace
}  // namespace kiln::server
