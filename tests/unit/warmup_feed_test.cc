// The warm-up feed follows how a model uses its inputs (runtime/check/input_hints.h): ids
// that index a table stay inside it, masks are 0/1, the user's ranges win, inputs used
// otherwise get no hint. And the comparison's tolerance scales with each output's magnitude
// (differential.h ScaledToOutputs): rounding-sized errors near zero pass, a shift of a
// percent of the scale does not.
#include <gtest/gtest.h>

#include <cmath>

#include "ir/builder.h"
#include "runtime/check/differential.h"
#include "runtime/check/input_hints.h"

namespace kiln::check {
namespace {

Tensor Filled(std::vector<int64_t> shape, float v) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = v;
  return t;
}

// ids -> Cast -> Gather(word [1000, 4]); pos -> Gather(pos [64, 4]); mask -> Unsqueeze ->
// Cast(float) -> Sub(1, .) -> Mul(-10000); cond -> Where; x (float) and y (int, the data of a
// Gather) are used otherwise.
std::unique_ptr<Graph> TextLike() {
  GraphBuilder b;
  const Shape s = {Dim(1), Dim(8)};
  Value* ids = b.Input("ids", DType::kInt64, s);
  Value* pos = b.Input("pos", DType::kInt64, s);
  Value* mask = b.Input("mask", DType::kInt64, s);
  Value* cond = b.Input("cond", DType::kBool, s);
  Value* x = b.Input("x", DType::kFloat32, {Dim(1), Dim(8), Dim(4)});
  Value* y = b.Input("y", DType::kInt64, {Dim(8)});
  Value* ids32 = b.Op("Cast", {ids}, {{"to", Attribute::Int(6)}});
  Value* e = b.Op("Add", {b.Op("Gather", {b.Constant("word", Filled({1000, 4}, 0.1f)), ids32}),
                          b.Op("Gather", {b.Constant("pos_emb", Filled({64, 4}, 0.2f)), pos})});
  Value* m =
      b.Op("Cast", {b.Op("Unsqueeze", {mask, b.Constant("ax", Tensor::FromInt64({2}, {1}))})},
           {{"to", Attribute::Int(1)}});
  Value* add = b.Op("Mul", {b.Op("Sub", {b.Constant("one", Tensor::FromFloat({1.f})), m}),
                            b.Constant("big", Tensor::FromFloat({-10000.f}))});
  Value* h = b.Op("Add", {b.Op("Add", {e, add}), x});
  b.Output(b.Op("Where", {b.Op("Unsqueeze", {cond, b.Constant("ax2", Tensor::FromInt64({2}, {1}))}),
                          h, b.Constant("zero", Tensor::FromFloat({0.f}))}));
  b.Output(b.Op("Gather", {y, b.Constant("i", Tensor::FromInt64({0, 1}, {2}))}));
  return b.Build();
}

TEST(InputHints, IdsStayInTheirTableAndMasksAreBinary) {
  auto g = TextLike();
  const auto hints = InferInputHints(*g);
  ASSERT_TRUE(hints.count("ids"));
  EXPECT_EQ(hints.at("ids").hi, 999);  // through the Cast
  EXPECT_FALSE(hints.at("ids").binary);
  EXPECT_NE(hints.at("ids").why.find("word"), std::string::npos) << hints.at("ids").why;
  EXPECT_EQ(hints.at("pos").hi, 63);
  ASSERT_TRUE(hints.count("mask"));
  EXPECT_TRUE(hints.at("mask").binary);
  EXPECT_EQ(hints.at("mask").hi, 1);
  EXPECT_TRUE(hints.count("cond") && hints.at("cond").binary);
  // Negative cases: a float added in, and an int that is a Gather's data, not its indices.
  EXPECT_EQ(hints.count("x"), 0u);
  EXPECT_EQ(hints.count("y"), 0u);
}

TEST(InputHints, ASubFromAnythingButOneIsNoMask) {
  GraphBuilder b;
  Value* m = b.Input("m", DType::kFloat32, {Dim(4)});
  b.Output(b.Op("Sub", {b.Constant("two", Tensor::FromFloat({2.f})), m}));
  // Equal with 0 is a mask (DistilBERT's mask == 0); with 5 it is not.
  Value* e = b.Input("e", DType::kInt64, {Dim(4)});
  b.Output(b.Op("Equal", {e, b.Constant("zero", Tensor::FromInt64({0}))}));
  Value* f = b.Input("f", DType::kInt64, {Dim(4)});
  b.Output(b.Op("Equal", {f, b.Constant("five", Tensor::FromInt64({5}))}));
  // Ids compared with the padding id 0 still index their table.
  Value* ids = b.Input("ids", DType::kInt64, {Dim(4)});
  b.Output(b.Op("Equal", {ids, b.Constant("pad", Tensor::FromInt64({0}))}));
  b.Output(b.Op("Gather", {b.Constant("table", Tensor::FromFloat({1, 2, 3}, {3})), ids}));
  auto g = b.Build();
  const auto hints = InferInputHints(*g);
  EXPECT_EQ(hints.count("m"), 0u);
  ASSERT_EQ(hints.count("e"), 1u);
  EXPECT_TRUE(hints.at("e").binary);
  EXPECT_EQ(hints.count("f"), 0u);
  ASSERT_EQ(hints.count("ids"), 1u);
  EXPECT_FALSE(hints.at("ids").binary);
  EXPECT_EQ(hints.at("ids").hi, 2);
}

TEST(InputHints, FeedFollowsHintsAndTheUsersRangesWin) {
  auto g = TextLike();
  InputRanges r;
  r.per_input["pos"] = {5, 6};
  const InputRanges with = WithInputHints(*g, r);
  auto feed = RandomInputs(*g, with);
  ASSERT_TRUE(feed.ok()) << feed.status();
  bool saw_big_id = false;
  for (int64_t i = 0; i < 8; ++i) {
    const int64_t id = feed->at("ids").data<int64_t>()[i];
    EXPECT_TRUE(id >= 0 && id <= 999) << id;
    saw_big_id |= id > 10;  // the old flat [0, 10] draw never left the first rows
    const int64_t p = feed->at("pos").data<int64_t>()[i];
    EXPECT_TRUE(p == 5 || p == 6) << p;
    const int64_t mk = feed->at("mask").data<int64_t>()[i];
    EXPECT_TRUE(mk == 0 || mk == 1) << mk;
  }
  EXPECT_TRUE(saw_big_id);
  // A float mask is drawn from {0, 1} exactly.
  InputRanges fr;
  fr.binary.insert("x");
  auto ffeed = RandomInputs(*g, fr);
  ASSERT_TRUE(ffeed.ok());
  for (int64_t i = 0; i < ffeed->at("x").numel(); ++i) {
    const float v = ffeed->at("x").data<float>()[i];
    EXPECT_TRUE(v == 0.f || v == 1.f) << v;
  }
}

TEST(ScaledTolerance, RoundingNearZeroPassesAPercentOfTheScaleFails) {
  // An output of scale ~1 with one element near zero.
  Tensor want = Filled({64}, 1.f);
  want.mutable_data<float>()[0] = 1e-4f;
  Tensor rounded = want.Clone(), wrong = want.Clone();
  rounded.mutable_data<float>()[0] += 3e-4f;  // float32 noise through many layers
  for (int64_t i = 0; i < 64; ++i) wrong.mutable_data<float>()[i] *= 1.01f;  // a wrong kernel
  const Tolerance tol;                                                       // rtol 1e-3, atol 1e-4
  const ref::TensorMap w = {{"y", want}};
  EXPECT_FALSE(CompareOutputs(w, {{"y", rounded}}, tol).ok);  // elementwise alone fails it
  const Tolerance scaled = ScaledToOutputs(w, tol);
  EXPECT_NEAR(scaled.output_atol.at("y"), 1e-3, 1e-5);
  EXPECT_TRUE(CompareOutputs(w, {{"y", rounded}}, scaled).ok);
  EXPECT_FALSE(CompareOutputs(w, {{"y", wrong}}, scaled).ok);
  // Non-finite values do not count toward the scale; integer outputs get no floor.
  Tensor nan = Filled({4}, std::nanf(""));
  nan.mutable_data<float>()[0] = 2.f;
  const Tolerance s2 = ScaledToOutputs({{"n", nan}, {"i", Tensor::FromInt64({5, 6})}}, tol);
  EXPECT_NEAR(s2.output_atol.at("n"), 2e-3, 1e-9);
  EXPECT_EQ(s2.output_atol.count("i"), 0u);
}

}  // namespace
}  // namespace kiln::check
