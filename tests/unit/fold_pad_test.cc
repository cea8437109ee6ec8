// fold_pad tests: what moves into the Conv / AveragePool (structure), that the graph still
// computes the same (the reference interpreter before and after), and the Pads it must leave.
#include "compiler/passes/fold_pad.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ir/builder.h"
#include "tests/unit/pass_test_util.h"
#include "tests/unit/test_tensors.h"

namespace kiln::passes {
namespace {

using testing::CountOps;
using testing::FindOp;
using testing::SineRamp;

const ref::TensorMap kImage = {{"x", SineRamp({1, 2, 5, 6}, 0.37, 0.1)}};

struct PadSpec {
  std::vector<int64_t> pads = {0, 0, 1, 2, 0, 0, 2, 1};  // [N, C, H, W] begins, then ends
  std::string mode = "constant";
  double fill = 0.0;
  bool fill_given = false;
  std::vector<int64_t> axes;  // opset 18's axes input, when not empty
};

PadSpec Pads(std::vector<int64_t> pads) {
  PadSpec p;
  p.pads = std::move(pads);
  return p;
}
PadSpec Mode(std::string mode) {
  PadSpec p;
  p.mode = std::move(mode);
  return p;
}
PadSpec Fill(double fill) {
  PadSpec p;
  p.fill = fill;
  p.fill_given = true;
  return p;
}

Value* AddPad(GraphBuilder& b, Value* x, const PadSpec& p) {
  const int64_t n = static_cast<int64_t>(p.pads.size());
  std::vector<Value*> in = {x, b.Constant("pads", Tensor::FromInt64(p.pads, {n}))};
  if (p.fill_given || !p.axes.empty()) {
    in.push_back(p.fill_given ? b.Constant("fill", Tensor::Scalar(DType::kFloat32, p.fill))
                              : nullptr);
  }
  if (!p.axes.empty()) {
    in.push_back(b.Constant("axes", Tensor::FromInt64(p.axes, {static_cast<int64_t>(p.axes.size())})));
  }
  return b.Op("Pad", in, {{"mode", Attribute::String(p.mode)}});
}

std::unique_ptr<Graph> PadConv(const PadSpec& p, std::map<std::string, Attribute> conv_attrs = {}) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 2, 5, 6});
  Value* padded = AddPad(b, x, p);
  b.Output(b.Op("Conv", {padded, b.Constant("w", SineRamp({3, 2, 3, 3}, 0.7, 0.0))}, conv_attrs));
  return b.Build();
}

std::unique_ptr<Graph> PadPool(const PadSpec& p, std::map<std::string, Attribute> attrs) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 2, 5, 6});
  attrs["kernel_shape"] = Attribute::Ints({3, 3});
  b.Output(b.Op("AveragePool", {AddPad(b, x, p)}, attrs));
  return b.Build();
}

TEST(FoldPad, MovesAsymmetricZeroPadIntoConvPads) {
  auto g = PadConv({}, {{"pads", Attribute::Ints({1, 0, 0, 1})}, {"strides", Attribute::Ints({2, 1})}});
  EXPECT_TRUE(testing::RunPassAndCompare(*g, FoldPad, kImage, {1e-6, 1e-6}));
  EXPECT_EQ(CountOps(*g, "Pad"), 0);
  const Node* conv = FindOp(*g, "Conv");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->GetInts("pads"), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(conv->input(0)->name, "x");
}

TEST(FoldPad, ExplicitZeroFillAndAxesInputFold) {
  PadSpec p = Fill(0.0);
  p.pads = {1, 1, 0, 2};
  p.axes = {-1, 2};
  auto g = PadConv(p, {{"auto_pad", Attribute::String("VALID")}});
  EXPECT_TRUE(testing::RunPassAndCompare(*g, FoldPad, kImage, {1e-6, 1e-6}));
  const Node* conv = FindOp(*g, "Conv");
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(CountOps(*g, "Pad"), 0);
  EXPECT_EQ(conv->GetInts("pads"), (std::vector<int64_t>{1, 1, 2, 0}));  // H, W begins; ends
  EXPECT_EQ(conv->GetString("auto_pad", ""), "NOTSET");
}

TEST(FoldPad, AveragePoolCountsThePadsZerosAfterTheFold) {
  auto g = PadPool(Pads({0, 0, 1, 1, 0, 0, 1, 1}), {});
  EXPECT_TRUE(testing::RunPassAndCompare(*g, FoldPad, kImage, {1e-6, 1e-6}));
  const Node* pool = FindOp(*g, "AveragePool");
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(CountOps(*g, "Pad"), 0);
  EXPECT_EQ(pool->GetInt("count_include_pad", 0), 1);
  EXPECT_EQ(pool->GetInts("pads"), (std::vector<int64_t>{1, 1, 1, 1}));
}

TEST(FoldPad, AveragePoolAlreadyCountingPadsAddsToThem) {
  auto g = PadPool({}, {{"pads", Attribute::Ints({1, 1, 1, 1})},
                        {"count_include_pad", Attribute::Int(1)}});
  EXPECT_TRUE(testing::RunPassAndCompare(*g, FoldPad, kImage, {1e-6, 1e-6}));
  EXPECT_EQ(CountOps(*g, "Pad"), 0);
  EXPECT_EQ(FindOp(*g, "AveragePool")->GetInts("pads"), (std::vector<int64_t>{2, 3, 3, 2}));
}

// Each of these changes the answer if folded (or has no pads attribute to fold into).
TEST(FoldPad, LeavesPadsThatAreNotZeroSpatialPadding) {
  const std::vector<PadSpec> refused = {
      Mode("reflect"),
      Mode("edge"),
      Fill(0.5),
      Pads({0, 0, 1, -1, 0, 0, 1, 1}),  // a crop
      Pads({0, 1, 1, 1, 0, 0, 1, 1}),   // channels
      Pads({1, 0, 0, 0, 0, 0, 0, 0}),   // batch
  };
  for (const PadSpec& p : refused) {
    auto g = PadPool(p, {});  // an AveragePool reads any channel count
    EXPECT_FALSE(testing::RunPassAndCompare(*g, FoldPad, kImage)) << p.mode << " " << p.fill;
    EXPECT_EQ(CountOps(*g, "Pad"), 1);
  }
}

TEST(FoldPad, LeavesReadersThatCountPaddingDifferently) {
  // count_include_pad 0 with pads of its own: the two paddings would be counted apart.
  auto own = PadPool({}, {{"pads", Attribute::Ints({1, 1, 1, 1})}});
  EXPECT_FALSE(testing::RunPassAndCompare(*own, FoldPad, kImage));
  // ceil_mode: a last window past the padded end averages over fewer elements.
  auto ceil = PadPool({}, {{"ceil_mode", Attribute::Int(1)}, {"strides", Attribute::Ints({2, 2})}});
  EXPECT_FALSE(testing::RunPassAndCompare(*ceil, FoldPad, kImage));
  // SAME_UPPER computes its own pads from the padded size.
  auto same = PadConv({}, {{"auto_pad", Attribute::String("SAME_UPPER")}});
  EXPECT_FALSE(testing::RunPassAndCompare(*same, FoldPad, kImage));
  // MaxPool pads with -inf, not zero.
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 2, 5, 6});
  b.Output(b.Op("MaxPool", {AddPad(b, x, {})}, {{"kernel_shape", Attribute::Ints({3, 3})}}));
  auto max = b.Build();
  EXPECT_FALSE(testing::RunPassAndCompare(*max, FoldPad, kImage));
  EXPECT_EQ(CountOps(*max, "Pad"), 1);
}

TEST(FoldPad, KeepsThePadForAReaderThatCannotTakeIt) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 2, 5, 6});
  Value* padded = AddPad(b, x, {});
  b.Output(b.Op("Conv", {padded, b.Constant("w", SineRamp({3, 2, 3, 3}, 0.7, 0.0))}));
  b.Output(b.Op("Relu", {padded}));
  auto g = b.Build();
  EXPECT_TRUE(testing::RunPassAndCompare(*g, FoldPad, kImage, {1e-6, 1e-6}));
  EXPECT_EQ(CountOps(*g, "Pad"), 1);  // the Relu still reads it
  EXPECT_EQ(FindOp(*g, "Conv")->input(0)->name, "x");
}

}  // namespace
}  // namespace kiln::passes
