// Shape rules for NonMaxSuppression, int64 (selected, 3) with the count known only from the
// data, and RoiAlign, (num_rois, C, output_height, output_width). Both reject inputs whose
// known dims cannot fit, and RoiAlign its unknown mode names, before anything runs.
#include "compiler/shape/nn_rules.h"
#include "compiler/shape/shape_util.h"

namespace kiln::shape {
namespace {

// False when both dims are known and differ.
bool Compatible(const Dim& a, const Dim& b) {
  return !a.known() || !b.known() || a.value == b.value;
}

absl::Status NonMaxSuppressionRule(InferContext& ctx) {
  std::optional<Shape> boxes = ctx.input_shape(0), scores = ctx.input_shape(1);
  if (boxes && (boxes->size() != 3 || !Compatible((*boxes)[2], Dim(4)))) {
    return ctx.Invalid("boxes must be (N, spatial, 4), not " + ShapeToString(*boxes));
  }
  if (scores && scores->size() != 3) {
    return ctx.Invalid("scores must be (N, classes, spatial), not " + ShapeToString(*scores));
  }
  if (boxes && scores &&
      (!Compatible((*boxes)[0], (*scores)[0]) || !Compatible((*boxes)[1], (*scores)[2]))) {
    return ctx.Invalid("boxes " + ShapeToString(*boxes) + " and scores " + ShapeToString(*scores) +
                       " do not fit");
  }
  const int64_t cpb = ctx.node().GetInt("center_point_box", 0);
  if (cpb != 0 && cpb != 1) return ctx.Invalid("center_point_box must be 0 or 1");
  ctx.set_output(0, DType::kInt64, Shape{Dim(), Dim(3)});
  return absl::OkStatus();
}

absl::Status RoiAlignRule(InferContext& ctx) {
  const Node& node = ctx.node();
  const std::string mode = node.GetString("mode", "avg");
  if (mode != "avg" && mode != "max") return ctx.Invalid("unknown mode '" + mode + "'");
  const std::string ctm = node.GetString("coordinate_transformation_mode", "half_pixel");
  if (ctm != "half_pixel" && ctm != "output_half_pixel") {
    return ctx.Invalid("unknown coordinate_transformation_mode '" + ctm + "'");
  }
  const int64_t oh = node.GetInt("output_height", 1), ow = node.GetInt("output_width", 1);
  if (oh < 1 || ow < 1) return ctx.Invalid("output_height/width must be positive");
  std::optional<Shape> x = ctx.input_shape(0), rois = ctx.input_shape(1), idx = ctx.input_shape(2);
  if (x && x->size() != 4) return ctx.Invalid("X must be (N, C, H, W)");
  if (rois && (rois->size() != 2 || !Compatible((*rois)[1], Dim(4)))) {
    return ctx.Invalid("rois must be (num_rois, 4), not " + ShapeToString(*rois));
  }
  if (idx && (idx->size() != 1 || (rois && !Compatible((*idx)[0], (*rois)[0])))) {
    return ctx.Invalid("batch_indices must be (num_rois)");
  }
  Dim num_rois = rois ? (*rois)[0] : idx ? (*idx)[0] : Dim();
  if (!num_rois.known() && idx) num_rois = (*idx)[0];
  ctx.set_output(0, ctx.input_dtype(0), Shape{num_rois, x ? (*x)[1] : Dim(), Dim(oh), Dim(ow)});
  return absl::OkStatus();
}

}  // namespace

void RegisterDetectionRules(RuleRegistry& r) {
  r.Register("", "NonMaxSuppression", NonMaxSuppressionRule);
  r.Register("", "RoiAlign", RoiAlignRule);
}

}  // namespace kiln::shape
