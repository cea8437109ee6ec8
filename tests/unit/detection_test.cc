// NonMaxSuppression and RoiAlign: selections and pooled values worked out by hand (score
// order, strict thresholds, both box layouts, sampling grids, coordinate modes, the opset-10
// default), shape rules, and the errors bad shapes and modes give.
#include "tests/unit/op_test_util.h"

namespace kiln {
namespace {

using namespace optest;

// Three unit-high boxes in one batch and class, as (y1, x1, y2, x2): box 1 is box 0 shifted
// by 0.1 (IoU 0.9 / 1.1 = 0.82), box 2 overlaps neither.
const Tensor kBoxes = Floats({0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 2, 1, 3}, {1, 3, 4});
const Tensor kScores = Floats({0.5f, 0.9f, 0.7f}, {1, 1, 3});

absl::StatusOr<std::vector<Tensor>> Nms(const Tensor& boxes, const Tensor& scores,
                                        int64_t max_boxes, float iou, float score,
                                        Attrs attrs = {}) {
  return RunOp("NonMaxSuppression",
               {boxes, scores, Ints64({max_boxes}, {1}), Floats({iou}, {1}), Floats({score}, {1})},
               std::move(attrs));
}

TEST(NonMaxSuppression, KeepsByScoreAndSuppressesOverlaps) {
  auto r = Nms(kBoxes, kScores, 10, 0.5f, 0.0f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dtype(), DType::kInt64);
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{2, 3}));
  ExpectValues((*r)[0], {0, 0, 1, 0, 0, 2});  // box 0 loses to box 1
  auto loose = Nms(kBoxes, kScores, 10, 0.9f, 0.0f);
  ASSERT_TRUE(loose.ok()) << loose.status();
  ExpectValues((*loose)[0], {0, 0, 1, 0, 0, 2, 0, 0, 0});
  auto limited = Nms(kBoxes, kScores, 1, 0.9f, 0.0f);
  ASSERT_TRUE(limited.ok()) << limited.status();
  ExpectValues((*limited)[0], {0, 0, 1});
  // A score equal to the threshold is dropped: only scores above it take part.
  auto scored = Nms(kBoxes, kScores, 10, 0.9f, 0.7f);
  ASSERT_TRUE(scored.ok()) << scored.status();
  ExpectValues((*scored)[0], {0, 0, 1});
}

TEST(NonMaxSuppression, OmittedInputsSelectNothing) {
  // max_output_boxes_per_class defaults to 0.
  auto r = RunOp("NonMaxSuppression", {kBoxes, kScores});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].shape(), (std::vector<int64_t>{0, 3}));
}

TEST(NonMaxSuppression, CenterPointBoxes) {
  // (x_c, y_c, w, h): x 0..2 and x 1..3, both y 0..2, so IoU = 2 / 6. Read as corners the
  // second box would have no area and never be suppressed.
  const Tensor boxes = Floats({1, 1, 2, 2, 2, 1, 2, 2}, {1, 2, 4});
  const Tensor scores = Floats({0.9f, 0.8f}, {1, 1, 2});
  auto tight = Nms(boxes, scores, 5, 0.3f, 0.0f, {{"center_point_box", Int(1)}});
  ASSERT_TRUE(tight.ok()) << tight.status();
  ExpectValues((*tight)[0], {0, 0, 0});
  auto loose = Nms(boxes, scores, 5, 0.4f, 0.0f, {{"center_point_box", Int(1)}});
  ASSERT_TRUE(loose.ok()) << loose.status();
  ExpectValues((*loose)[0], {0, 0, 0, 0, 0, 1});
}

TEST(NonMaxSuppression, PerBatchAndClass) {
  // Two disjoint boxes per batch; one box per class, and batch 1 class 0 is all below 0.05.
  const Tensor boxes = Floats({0, 0, 1, 1, 0, 2, 1, 3, 0, 0, 1, 1, 0, 2, 1, 3}, {2, 2, 4});
  const Tensor scores = Floats({0.1f, 0.2f, 0.3f, 0, 0, 0, 0.6f, 0.7f}, {2, 2, 2});
  auto r = Nms(boxes, scores, 1, 0.5f, 0.05f);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[0], {0, 0, 1, 0, 1, 0, 1, 1, 1});
}

TEST(NonMaxSuppression, ShapeRuleAndBadInputs) {
  auto s = InferOp("NonMaxSuppression",
                   {{DType::kFloat32, ToShape({1, 6, 4})}, {DType::kFloat32, ToShape({1, 2, 6})}});
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)[0].has_value());
  ASSERT_EQ((*s)[0]->size(), 2u);
  EXPECT_FALSE((*s)[0]->at(0).known());
  EXPECT_EQ((*s)[0]->at(1).value, 3);
  ExpectInvalid(RunOp("NonMaxSuppression", {Iota({1, 3, 5}), kScores}).status());
  ExpectInvalid(RunOp("NonMaxSuppression", {Iota({3, 4}), kScores}).status());
  ExpectInvalid(RunOp("NonMaxSuppression", {kBoxes, Iota({1, 1, 2})}).status());
  ExpectInvalid(Nms(kBoxes, kScores, 3, 0.5f, 0.0f, {{"center_point_box", Int(2)}}).status());
  ExpectInvalid(RunKernel("NonMaxSuppression", {kBoxes, Iota({1, 1, 4})}).status());
  ExpectInvalid(Nms(kBoxes, kScores, 3, 1.5f, 0.0f).status());
  ExpectInvalid(
      RunKernel("NonMaxSuppression", {kBoxes, kScores, Floats({3}, {1}), Floats({0.5f}, {1})})
          .status());
  ExpectInvalid(
      RunKernel("NonMaxSuppression", {kBoxes, kScores, Ints64({3, 4}, {2}), Floats({0.5f}, {1})})
          .status());
}

// A 4x4 image holding 4y + x, on which bilinear sampling is exact inside the image.
const Tensor kImage = Iota({1, 1, 4, 4});

absl::StatusOr<std::vector<Tensor>> Roi(const Tensor& x, std::vector<float> rois,
                                        std::vector<int64_t> batch, Attrs attrs) {
  const int64_t n = static_cast<int64_t>(batch.size());
  return RunOp("RoiAlign", {x, Floats(std::move(rois), {n, 4}), Ints64(std::move(batch), {n})},
               std::move(attrs));
}

TEST(RoiAlign, AverageAndMaxOverSamples) {
  // half_pixel: region 0.5..2.5, samples at 1 and 2 on both axes read 5, 6, 9, 10.
  auto avg = Roi(kImage, {1, 1, 3, 3}, {0}, {{"sampling_ratio", Int(2)}});
  ASSERT_TRUE(avg.ok()) << avg.status();
  EXPECT_EQ((*avg)[0].shape(), (std::vector<int64_t>{1, 1, 1, 1}));
  ExpectValues((*avg)[0], {7.5});
  auto max = Roi(kImage, {1, 1, 3, 3}, {0}, {{"sampling_ratio", Int(2)}, {"mode", Str("max")}});
  ASSERT_TRUE(max.ok()) << max.status();
  ExpectValues((*max)[0], {10});
  // Four bins of one sample each: the same four pixels one per bin.
  auto bins =
      Roi(kImage, {1, 1, 3, 3}, {0},
          {{"sampling_ratio", Int(1)}, {"output_height", Int(2)}, {"output_width", Int(2)}});
  ASSERT_TRUE(bins.ok()) << bins.status();
  EXPECT_EQ((*bins)[0].shape(), (std::vector<int64_t>{1, 1, 2, 2}));
  ExpectValues((*bins)[0], {5, 6, 9, 10});
  // output_half_pixel does not shift: samples at 1.5 and 2.5 average to 4 * 2 + 2.
  auto legacy = Roi(
      kImage, {1, 1, 3, 3}, {0},
      {{"sampling_ratio", Int(2)}, {"coordinate_transformation_mode", Str("output_half_pixel")}});
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  ExpectValues((*legacy)[0], {10});
}

TEST(RoiAlign, ScaleBatchAndOutsideSamples) {
  auto scaled =
      Roi(kImage, {2, 2, 6, 6}, {0}, {{"sampling_ratio", Int(2)}, {"spatial_scale", Float(0.5f)}});
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  ExpectValues((*scaled)[0], {7.5});
  // The second image holds 16 more everywhere; a region far outside reads zero.
  auto batch =
      Roi(Iota({2, 1, 4, 4}), {1, 1, 3, 3, 10, 10, 12, 12}, {1, 0}, {{"sampling_ratio", Int(2)}});
  ASSERT_TRUE(batch.ok()) << batch.status();
  ExpectValues((*batch)[0], {23.5, 0});
}

TEST(RoiAlign, AdaptiveSamplingRatio) {
  // One row [0, 0, 9]; output_half_pixel makes the zero-high region one pixel high and the
  // samples' y (0.5) clamp to row 0. The 2-wide bin gets ceil(2) = 2 samples at x = 0.5 and
  // 1.5 (0 and 4.5); one sample (x = 1) reads 0; three (1/3, 1, 5/3) read 0, 0, 6.
  const Tensor x = Floats({0, 0, 9}, {1, 1, 1, 3});
  const Attrs legacy{{"coordinate_transformation_mode", Str("output_half_pixel")}};
  for (auto [ratio, want] : std::vector<std::pair<int64_t, double>>{{0, 2.25}, {1, 0}, {3, 2}}) {
    Attrs a = legacy;
    a["sampling_ratio"] = Int(ratio);
    auto r = Roi(x, {0, 0, 2, 0}, {0}, a);
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectValues((*r)[0], {want});
  }
}

TEST(RoiAlign, Opset10DefaultsToOutputHalfPixel) {
  GraphBuilder b(10);
  Value* x = b.Input("x", DType::kFloat32, ToShape({1, 1, 4, 4}));
  Value* rois = b.Input("rois", DType::kFloat32, ToShape({1, 4}));
  Value* idx = b.Input("idx", DType::kInt64, ToShape({1}));
  b.Output(b.Op("RoiAlign", {x, rois, idx}, {{"sampling_ratio", Int(2)}}));
  std::unique_ptr<Graph> g = b.Build();
  ASSERT_TRUE(shape::InferShapes(*g).ok());
  auto r = ref::Run(
      *g, {{"x", kImage}, {"rois", Floats({1, 1, 3, 3}, {1, 4})}, {"idx", Ints64({0}, {1})}});
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectValues((*r)[g->outputs[0]->name], {10});
}

TEST(RoiAlign, ShapeRuleAndBadInputs) {
  auto s = InferOp("RoiAlign",
                   {{DType::kFloat32, ToShape({2, 3, 8, 8})},
                    {DType::kFloat32, ToShape({5, 4})},
                    {DType::kInt64, ToShape({5})}},
                   {{"output_height", Int(2)}, {"output_width", Int(7)}});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(StaticDims(*(*s)[0]), (std::vector<int64_t>{5, 3, 2, 7}));
  ExpectInvalid(Roi(kImage, {1, 1, 3, 3}, {0}, {{"mode", Str("min")}}).status());
  ExpectInvalid(Roi(kImage, {1, 1, 3, 3}, {0}, {{"coordinate_transformation_mode", Str("aligned")}})
                    .status());
  ExpectInvalid(Roi(kImage, {1, 1, 3, 3}, {0}, {{"output_height", Int(0)}}).status());
  ExpectInvalid(Roi(kImage, {1, 1, 3, 3}, {1}, {}).status());  // batch index past N
  ExpectInvalid(Roi(Iota({1, 4, 4}), {1, 1, 3, 3}, {0}, {}).status());
  ExpectInvalid(RunOp("RoiAlign", {kImage, Iota({1, 5}), Ints64({0}, {1})}).status());
  ExpectInvalid(RunOp("RoiAlign", {kImage, Iota({2, 4}), Ints64({0}, {1})}).status());
  ExpectInvalid(RunKernel("RoiAlign", {kImage, Iota({1, 5}), Ints64({0}, {1})}).status());
  ExpectInvalid(
      RunKernel("RoiAlign", {kImage, Iota({1, 4}), Ints64({0}, {1})}, {{"mode", Str("min")}})
          .status());
}

}  // namespace
}  // namespace kiln
