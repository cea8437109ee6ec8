// NonMaxSuppression (opsets 10-11) and RoiAlign (opsets 10-22), the two object-detection
// operators.
//
// NonMaxSuppression greedily keeps, per (batch, class), the highest-scoring box and drops
// every remaining box whose IoU with a kept one is strictly above iou_threshold; boxes whose
// score is not above score_threshold never take part. Equal scores keep the lower box index
// first (a stable sort), which is the order ONNX's data and onnxruntime give. The output,
// (batch, class, box) triples in batch, class, selection order, has a size only the data
// decides.
//
// RoiAlign averages (or takes the max of) bilinear samples on a regular grid inside each
// output bin of a region of interest. It follows onnxruntime, whose behaviour the ONNX data
// records: samples more than one pixel outside the image read zero, samples just outside are
// clamped to the border, and in max mode each sample contributes the largest of its four
// weighted corner values rather than the interpolated value.
#include <algorithm>
#include <array>
#include <cmath>

#include "ops/kernel_util.h"
#include "ops/nn_ops.h"

namespace kiln::ref::nn {
namespace {

// A box as (y1, x1, y2, x2) with y1 <= y2 and x1 <= x2.
struct Box {
  double y1 = 0, x1 = 0, y2 = 0, x2 = 0;
  double area() const { return (y2 - y1) * (x2 - x1); }
};

// Box i of a (spatial, 4) block in either layout: corners in any diagonal order
// (center_point_box 0) or (x_center, y_center, width, height) (center_point_box 1).
Box ReadBox(const double* b, bool center) {
  if (center) {
    return {b[1] - b[3] / 2, b[0] - b[2] / 2, b[1] + b[3] / 2, b[0] + b[2] / 2};
  }
  return {std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
}

double IoU(const Box& a, const Box& b) {
  const double h = std::min(a.y2, b.y2) - std::max(a.y1, b.y1);
  const double w = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
  if (h <= 0 || w <= 0) return 0.0;
  const double inter = h * w, uni = a.area() + b.area() - inter;
  return uni > 0 ? inter / uni : 0.0;
}

// The single value of optional scalar input i as a double, or `fallback` when omitted.
absl::StatusOr<double> OptionalScalar(const Node& node, const KernelInputs& in, size_t i,
                                      double fallback) {
  if (i >= in.size() || in[i] == nullptr) return fallback;
  if (in[i]->numel() != 1) {
    return InvalidInput(node, "input " + std::to_string(i) + " must hold one value, not " +
                                  ShapeToString(in[i]->shape()));
  }
  return in[i]->GetDouble(0);
}

struct NmsOptions {
  bool center = false;
  int64_t max_per_class = 0;
  double iou = 0, score = -INFINITY;
};

absl::StatusOr<NmsOptions> ReadNmsOptions(const Node& node, const KernelInputs& in) {
  NmsOptions o;
  const int64_t cpb = node.GetInt("center_point_box", 0);
  if (cpb != 0 && cpb != 1) return InvalidInput(node, "center_point_box must be 0 or 1");
  o.center = cpb == 1;
  if (in.size() > 2 && in[2] != nullptr && IsFloatDType(in[2]->dtype())) {
    return InvalidInput(node, "max_output_boxes_per_class must be an integer");
  }
  ASSIGN_OR_RETURN(double max_boxes, OptionalScalar(node, in, 2, 0.0));
  // Above the box count it selects everything; clamping keeps the cast defined.
  o.max_per_class = static_cast<int64_t>(std::clamp(max_boxes, 0.0, 9.0e18));
  ASSIGN_OR_RETURN(o.iou, OptionalScalar(node, in, 3, 0.0));
  if (!(o.iou >= 0.0 && o.iou <= 1.0)) return InvalidInput(node, "iou_threshold must be in [0, 1]");
  if (in.size() > 4 && in[4] != nullptr) {
    ASSIGN_OR_RETURN(o.score, OptionalScalar(node, in, 4, 0.0));
  }
  return o;
}

// The box indices kept for one (batch, class): candidates by descending score, each kept
// unless it overlaps a kept box too much.
std::vector<int64_t> SelectBoxes(const std::vector<Box>& boxes, const double* scores,
                                 const NmsOptions& o) {
  std::vector<int64_t> order;
  for (int64_t i = 0; i < static_cast<int64_t>(boxes.size()); ++i) {
    if (scores[i] > o.score) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  std::vector<int64_t> kept;
  for (int64_t i : order) {
    if (static_cast<int64_t>(kept.size()) >= o.max_per_class) break;
    bool suppressed = false;
    for (int64_t k : kept) suppressed = suppressed || IoU(boxes[i], boxes[k]) > o.iou;
    if (!suppressed) kept.push_back(i);
  }
  return kept;
}

absl::StatusOr<std::vector<Tensor>> NonMaxSuppression(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* boxes, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* scores, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckFloat(node, *boxes));
  RETURN_IF_ERROR(CheckFloat(node, *scores));
  if (boxes->rank() != 3 || boxes->dim(2) != 4 || scores->rank() != 3 ||
      scores->dim(0) != boxes->dim(0) || scores->dim(2) != boxes->dim(1)) {
    return InvalidInput(node,
                        "boxes (N, spatial, 4) and scores (N, classes, spatial) do not fit: " +
                            ShapeToString(boxes->shape()) + ", " + ShapeToString(scores->shape()));
  }
  ASSIGN_OR_RETURN(NmsOptions o, ReadNmsOptions(node, in));
  const int64_t n = boxes->dim(0), classes = scores->dim(1), spatial = boxes->dim(1);
  const std::vector<double> bv = ToDoubles(*boxes), sv = ToDoubles(*scores);
  std::vector<int64_t> triples;
  std::vector<Box> batch_boxes(spatial);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t i = 0; i < spatial; ++i) {
      batch_boxes[i] = ReadBox(bv.data() + (b * spatial + i) * 4, o.center);
    }
    for (int64_t c = 0; c < classes; ++c) {
      for (int64_t i : SelectBoxes(batch_boxes, sv.data() + (b * classes + c) * spatial, o)) {
        triples.insert(triples.end(), {b, c, i});
      }
    }
  }
  const int64_t selected = static_cast<int64_t>(triples.size()) / 3;
  return std::vector<Tensor>{Tensor::FromInt64(triples, {selected, 3})};
}

struct RoiOptions {
  bool max = false, half_pixel = true;
  int64_t oh = 1, ow = 1, sampling = 0;
  double scale = 1.0;
};

absl::StatusOr<RoiOptions> ReadRoiOptions(const Node& node) {
  RoiOptions o;
  const std::string mode = node.GetString("mode", "avg");
  if (mode != "avg" && mode != "max") return InvalidInput(node, "unknown mode '" + mode + "'");
  o.max = mode == "max";
  // Opset 10 had no attribute and behaved as output_half_pixel; 16 made half_pixel the default.
  const std::string ctm = node.GetString("coordinate_transformation_mode",
                                         node.opset >= 16 ? "half_pixel" : "output_half_pixel");
  if (ctm != "half_pixel" && ctm != "output_half_pixel") {
    return InvalidInput(node, "unknown coordinate_transformation_mode '" + ctm + "'");
  }
  o.half_pixel = ctm == "half_pixel";
  o.oh = node.GetInt("output_height", 1);
  o.ow = node.GetInt("output_width", 1);
  o.sampling = node.GetInt("sampling_ratio", 0);
  o.scale = node.GetFloat("spatial_scale", 1.0f);
  if (o.oh < 1 || o.ow < 1) return InvalidInput(node, "output_height/width must be positive");
  if (o.sampling < 0) return InvalidInput(node, "sampling_ratio must not be negative");
  return o;
}

// One bilinear sample at (y, x) of an h x w plane: the four corner values already weighted,
// all zero when the point lies more than a pixel outside.
std::array<double, 4> WeightedCorners(const double* plane, int64_t h, int64_t w, double y,
                                      double x) {
  if (h <= 0 || w <= 0) return {0, 0, 0, 0};
  if (y < -1.0 || y > static_cast<double>(h) || x < -1.0 || x > static_cast<double>(w)) {
    return {0, 0, 0, 0};
  }
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  auto y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x);
  int64_t y1 = y0 + 1, x1 = x0 + 1;
  if (y0 >= h - 1) y = static_cast<double>(y0 = y1 = h - 1);
  if (x0 >= w - 1) x = static_cast<double>(x0 = x1 = w - 1);
  const double ly = y - y0, lx = x - x0, hy = 1 - ly, hx = 1 - lx;
  return {hy * hx * plane[y0 * w + x0], hy * lx * plane[y0 * w + x1], ly * hx * plane[y1 * w + x0],
          ly * lx * plane[y1 * w + x1]};
}

// Where one ROI's bins and samples lie: its top-left corner, bin size and samples per bin.
struct RoiGrid {
  double y0 = 0, x0 = 0, bh = 0, bw = 0;
  int64_t gh = 0, gw = 0;
};

// Samples per bin along one axis: the attribute, else the bin size rounded up. Bounded so
// that a NaN or huge ROI neither overflows the cast nor sets a count the budget cannot hold.
int64_t SamplesPerBin(double bin, int64_t sampling) {
  if (sampling > 0) return std::min<int64_t>(sampling, int64_t{1} << 20);
  const double n = std::ceil(bin);
  return n > 0 ? static_cast<int64_t>(std::min(n, 1048576.0)) : 0;
}

// roi is (x1, y1, x2, y2) in input pixels, scaled by spatial_scale.
RoiGrid MakeRoiGrid(const double* roi, const RoiOptions& o) {
  const double offset = o.half_pixel ? 0.5 : 0.0;
  RoiGrid g;
  g.x0 = roi[0] * o.scale - offset;
  g.y0 = roi[1] * o.scale - offset;
  double rw = roi[2] * o.scale - offset - g.x0, rh = roi[3] * o.scale - offset - g.y0;
  if (!o.half_pixel) {  // the legacy mode forces at least a one-pixel region
    rw = std::max(rw, 1.0);
    rh = std::max(rh, 1.0);
  }
  g.bh = rh / static_cast<double>(o.oh);
  g.bw = rw / static_cast<double>(o.ow);
  g.gh = SamplesPerBin(g.bh, o.sampling);
  g.gw = SamplesPerBin(g.bw, o.sampling);
  return g;
}

// One ROI's output bins over one channel plane.
void PoolRoi(const double* plane, int64_t h, int64_t w, const RoiGrid& g, const RoiOptions& o,
             double* out) {
  const double count = static_cast<double>(std::max<int64_t>(g.gh * g.gw, 1));
  for (int64_t ph = 0; ph < o.oh; ++ph) {
    for (int64_t pw = 0; pw < o.ow; ++pw) {
      double acc = 0.0;
      bool first = true;
      for (int64_t iy = 0; iy < g.gh; ++iy) {
        const double y = g.y0 + ph * g.bh + (iy + 0.5) * g.bh / g.gh;
        for (int64_t ix = 0; ix < g.gw; ++ix) {
          const double x = g.x0 + pw * g.bw + (ix + 0.5) * g.bw / g.gw;
          const std::array<double, 4> c = WeightedCorners(plane, h, w, y, x);
          if (!o.max) {
            acc += c[0] + c[1] + c[2] + c[3];
          } else {
            const double m = *std::max_element(c.begin(), c.end());
            acc = first ? m : std::max(acc, m);
          }
          first = false;
        }
      }
      out[ph * o.ow + pw] = o.max ? acc : acc / count;
    }
  }
}

absl::StatusOr<std::vector<Tensor>> RoiAlign(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* rois, RequireInput(node, in, 1));
  ASSIGN_OR_RETURN(const Tensor* idx, RequireInput(node, in, 2));
  RETURN_IF_ERROR(CheckFloat(node, *x));
  ASSIGN_OR_RETURN(std::vector<double> rv, FloatInput(node, in, 1, x));
  RETURN_IF_ERROR(CheckDType(node, idx->dtype(), {DType::kInt64, DType::kInt32}));
  ASSIGN_OR_RETURN(RoiOptions o, ReadRoiOptions(node));
  if (x->rank() != 4 || rois->rank() != 2 || rois->dim(1) != 4 || idx->rank() != 1 ||
      idx->dim(0) != rois->dim(0)) {
    return InvalidInput(node, "X (N, C, H, W), rois (R, 4) and batch_indices (R) do not fit: " +
                                  ShapeToString(x->shape()) + ", " + ShapeToString(rois->shape()) +
                                  ", " + ShapeToString(idx->shape()));
  }
  const int64_t r = rois->dim(0), c = x->dim(1), h = x->dim(2), w = x->dim(3);
  const std::vector<int64_t> out_shape{r, c, o.oh, o.ow};
  ASSIGN_OR_RETURN(int64_t total, CheckedNumel(node, out_shape));
  const std::vector<int64_t> batch = idx->ToInt64Vector();
  const std::vector<double> xv = ToDoubles(*x);
  std::vector<RoiGrid> grids(r);
  double samples = 0;  // in double: the product of hostile sizes must not overflow
  for (int64_t i = 0; i < r; ++i) {
    if (batch[i] < 0 || batch[i] >= x->dim(0)) {
      return InvalidInput(node, "batch index " + std::to_string(batch[i]) + " out of range");
    }
    grids[i] = MakeRoiGrid(rv.data() + i * 4, o);
    samples += static_cast<double>(grids[i].gh * grids[i].gw) * static_cast<double>(total / r);
  }
  if (samples > static_cast<double>(kMaxElements)) {
    return InvalidInput(node, "the ROIs need too many samples");
  }
  std::vector<double> y(total);
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      PoolRoi(xv.data() + (batch[i] * c + ch) * h * w, h, w, grids[i], o,
              y.data() + (i * c + ch) * o.oh * o.ow);
    }
  }
  return std::vector<Tensor>{FromDoubles(x->dtype(), out_shape, y)};
}

}  // namespace

void RegisterDetectionKernels(KernelRegistry& r) {
  r.Register("", "NonMaxSuppression", NonMaxSuppression);
  r.Register("", "RoiAlign", RoiAlign);
}

}  // namespace kiln::ref::nn
