// CutToLastPosition: a model's output cut to its last position, the position-wise work before
// it cut too (the reference before and after: the cut output equals the last position of the
// whole one; other outputs unchanged), where the walk must stop (a node whose result another
// output reads, a softmax over the positions themselves), symbolic dims, and the refusals.
#include "compiler/shape/last_position.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ir/builder.h"
#include "ir/verifier.h"
#include "ops/interpreter.h"
#include "tests/unit/pass_test_util.h"

namespace kiln::shape {
namespace {

using testing::CountOps;

constexpr int64_t kPositions = 5, kHidden = 4, kVocab = 6;

Tensor Ramp(std::vector<int64_t> shape, float scale, float offset) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = std::sin(scale * i + offset);
  return Tensor::FromFloat(v, std::move(shape));
}

struct Options {
  bool hidden_output = false;       // the attention's result is an output too
  bool mix_positions = false;       // a softmax over the positions before the norm
  Dim positions = Dim(kPositions);  // the sequence dim of the input
  bool mask = false;                // an attention_mask input [1, kPast + positions]
  int64_t opset = 17;
};

constexpr int64_t kPast = 2;

// The logits: the tail's last output.
const std::string& Logits(const Graph& g) { return g.outputs.back()->name; }

// A decoder's tail: attention over h (all positions), an RMSNorm written out in elementwise
// ops, the vocabulary projection with a bias. Outputs: logits [1, positions, vocab] (and the
// attention's result).
std::unique_ptr<Graph> Tail(const Options& o) {
  GraphBuilder b(o.opset);
  Value* h = b.Input("h", DType::kFloat32, {1, o.positions, kHidden});
  if (o.mask) {
    const Dim width = o.positions.known() ? Dim(kPast + o.positions.value) : Dim::Symbol("total");
    b.Input("attention_mask", DType::kInt64, {1, width});
  }
  Value* ht = b.Op("Transpose", {h}, {{"perm", Attribute::Ints({0, 2, 1})}});
  Value* scores = b.Op("MatMul", {h, ht});
  Value* p = b.Op("Softmax", {scores}, {{"axis", Attribute::Int(-1)}});
  Value* ctx = b.Op("MatMul", {p, h});
  if (o.hidden_output) b.Output(ctx);
  Value* x = o.mix_positions ? b.Op("Softmax", {ctx}, {{"axis", Attribute::Int(1)}}) : ctx;
  Value* sq = b.Op("Pow", {x, b.Constant("two", Tensor::FromFloat({2.0f}, {}))});
  Value* ms = b.Op("ReduceMean", {sq, b.Constant("last", Tensor::FromInt64({-1}, {1}))});
  Value* eps = b.Op("Add", {ms, b.Constant("eps", Tensor::FromFloat({1e-5f}, {}))});
  Value* normed = b.Op("Div", {x, b.Op("Sqrt", {eps})});
  Value* scaled = b.Op("Mul", {normed, b.Constant("gamma", Ramp({kHidden}, 0.7f, 0.3f))});
  Value* proj = b.Op("MatMul", {scaled, b.Constant("w", Ramp({kHidden, kVocab}, 0.37f, 1.0f))});
  b.Output(b.Op("Add", {proj, b.Constant("bias", Ramp({kVocab}, 0.5f, 0.2f))}));
  std::unique_ptr<Graph> g = b.Build();
  EXPECT_TRUE(InferShapes(*g).ok());
  return g;
}

ref::TensorMap Feed() { return {{"h", Ramp({1, kPositions, kHidden}, 0.9f, 0.1f)}}; }

// The cut graph's outputs against the whole graph's: logits is the last position of the
// whole logits, every other output is unchanged.
void ExpectLastPositionOf(const Graph& whole, const Graph& cut) {
  auto want = ref::Run(whole, Feed());
  auto got = ref::Run(cut, Feed());
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_TRUE(got.ok()) << got.status();
  for (const auto& [name, w] : *want) {
    const Tensor& t = got->at(name);
    if (name != Logits(whole)) {
      ASSERT_EQ(t.shape(), w.shape()) << name;
      for (int64_t i = 0; i < w.numel(); ++i) EXPECT_EQ(t.GetDouble(i), w.GetDouble(i)) << name;
      continue;
    }
    ASSERT_EQ(t.shape(), (std::vector<int64_t>{1, 1, kVocab}));
    for (int64_t v = 0; v < kVocab; ++v) {
      EXPECT_NEAR(t.GetDouble(v), w.GetDouble((kPositions - 1) * kVocab + v), 1e-5) << v;
    }
  }
}

TEST(LastPosition, TheProjectionNormAndAttentionRunOnTheLastPositionOnly) {
  std::unique_ptr<Graph> g = Tail({});
  std::unique_ptr<Graph> whole = g->Clone();
  absl::StatusOr<LastPositionCut> cut = CutToLastPosition(*g, Logits(*g), 1);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_TRUE(VerifyGraph(*g).ok()) << VerifyGraph(*g);
  // The whole tail back to the attention's query rows: h is read whole by the keys
  // (Transpose) and the values (the second MatMul's right operand), cut for the queries.
  EXPECT_EQ(cut->products, 3);
  EXPECT_EQ(cut->slices, 1);
  EXPECT_EQ(CountOps(*g, "Slice"), 1);
  EXPECT_EQ(testing::FindOp(*g, "Slice")->inputs[0]->name, "h");
  ExpectLastPositionOf(*whole, *g);
}

TEST(LastPosition, ANodeAnotherOutputReadsStaysWhole) {
  std::unique_ptr<Graph> g = Tail({.hidden_output = true});
  std::unique_ptr<Graph> whole = g->Clone();
  absl::StatusOr<LastPositionCut> cut = CutToLastPosition(*g, Logits(*g), 1);
  ASSERT_TRUE(cut.ok()) << cut.status();
  // Norm and projection only: the attention's result is an output, cut where the norm reads it.
  EXPECT_EQ(cut->products, 1);
  EXPECT_EQ(cut->nodes, 8);
  EXPECT_EQ(cut->slices, 1);
  ExpectLastPositionOf(*whole, *g);
}

TEST(LastPosition, TheWalkStopsAtASoftmaxOverThePositions) {
  std::unique_ptr<Graph> g = Tail({.mix_positions = true});
  std::unique_ptr<Graph> whole = g->Clone();
  absl::StatusOr<LastPositionCut> cut = CutToLastPosition(*g, Logits(*g), 1);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(cut->products, 1);  // the projection; the attention stays before the softmax
  EXPECT_EQ(testing::FindOp(*g, "Slice")->inputs[0]->producer->op_type, "Softmax");
  ExpectLastPositionOf(*whole, *g);
}

TEST(LastPosition, SymbolicPositionsGiveAnOutputOfOnePosition) {
  std::unique_ptr<Graph> g = Tail({.positions = Dim::Symbol("sequence")});
  ASSERT_TRUE(CutToLastPosition(*g, Logits(*g), 1).ok());
  const Value* logits = g->FindValue(Logits(*g));
  ASSERT_TRUE(logits->shape);
  EXPECT_EQ(ShapeToString(*logits->shape), ShapeToString({Dim(1), Dim(1), Dim(kVocab)}));
  EXPECT_EQ(ShapeToString(*g->FindValue("h")->shape),
            ShapeToString({Dim(1), Dim::Symbol("sequence"), Dim(kHidden)}));
}

// A mask over kPast cached positions and kPositions new ones, the first `real` of the new
// ones real.
Tensor MaskWith(int64_t real) {
  std::vector<int64_t> m(kPast + kPositions, 1);
  for (int64_t k = kPast + real; k < kPast + kPositions; ++k) m[static_cast<size_t>(k)] = 0;
  return Tensor::FromInt64(m, {1, kPast + kPositions});
}

TEST(LastPosition, ByTheMaskTheLastRealPositionIsKeptWhereverThePaddingStarts) {
  std::unique_ptr<Graph> g = Tail({.mask = true});
  std::unique_ptr<Graph> whole = g->Clone();
  absl::StatusOr<LastPositionCut> cut = CutToLastPosition(*g, Logits(*g), 1, "attention_mask");
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_TRUE(cut->by_mask);
  EXPECT_TRUE(VerifyGraph(*g).ok()) << VerifyGraph(*g);
  EXPECT_EQ(cut->products, 3);
  EXPECT_EQ(testing::FindOp(*g, "Gather")->inputs[0]->name, "h");
  // Every count of real new positions (0: none, the last position as without a mask).
  for (int64_t real = 0; real <= kPositions; ++real) {
    ref::TensorMap feed = Feed();
    feed["attention_mask"] = MaskWith(real);
    auto want = ref::Run(*whole, feed);
    auto got = ref::Run(*g, feed);
    ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
    const Tensor& w = want->at(Logits(*whole));
    const Tensor& t = got->at(Logits(*g));
    ASSERT_EQ(t.shape(), (std::vector<int64_t>{1, 1, kVocab}));
    const int64_t at = real == 0 ? kPositions - 1 : real - 1;
    for (int64_t v = 0; v < kVocab; ++v) {
      EXPECT_NEAR(t.GetDouble(v), w.GetDouble(at * kVocab + v), 1e-5) << real << " " << v;
    }
  }
}

TEST(LastPosition, ByTheMaskRefusesAMaskItCannotRead) {
  std::unique_ptr<Graph> g = Tail({.mask = true});
  // Not an input; an input of another rank.
  EXPECT_EQ(CutToLastPosition(*g, Logits(*g), 1, "mask").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CutToLastPosition(*g, Logits(*g), 1, "h").status().code(),
            absl::StatusCode::kInvalidArgument);
  // ReduceSum takes its axes as an input from opset 13 only.
  std::unique_ptr<Graph> old = Tail({.mask = true, .opset = 12});
  EXPECT_EQ(CutToLastPosition(*old, Logits(*old), 1, "attention_mask").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CountOps(*g, "Gather") + CountOps(*old, "Gather"), 0) << "a refused cut edits nothing";
  // Without the mask the same graph is cut at its last position.
  absl::StatusOr<LastPositionCut> plain = CutToLastPosition(*old, Logits(*old), 1);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->by_mask);
}

TEST(LastPosition, RefusesWhatItCannotCut) {
  {  // an output made by a node that moves positions around: nothing to save
    GraphBuilder b(17);
    Value* h = b.Input("h", DType::kFloat32, {1, kPositions, kHidden});
    Value* t = b.Op("Transpose", {h}, {{"perm", Attribute::Ints({0, 2, 1})}});
    b.Output(t);
    std::unique_ptr<Graph> g = b.Build();
    absl::StatusOr<LastPositionCut> cut = CutToLastPosition(*g, t->name, 1);
    EXPECT_EQ(cut.status().code(), absl::StatusCode::kFailedPrecondition) << cut.status();
    EXPECT_EQ(CountOps(*g, "Slice"), 0);
  }
  std::unique_ptr<Graph> g = Tail({});
  EXPECT_EQ(CutToLastPosition(*g, "nope", 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CutToLastPosition(*g, Logits(*g), 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CountOps(*g, "Slice"), 0);
}

}  // namespace
}  // namespace kiln::shape
