// Reference Resize (opset 11-19 attributes, the internal form) and Upsample.
//
// The ONNX reference evaluates each output element by nested 1-D interpolation; because the
// per-axis weights do not depend on the other axes, that equals applying 1-D interpolation
// along one axis at a time, which is what this file does (in double, then converted).
// Weights follow onnx/backend/test/case/node/resize.py: neighbours are the n integers
// nearest to the source coordinate (ties to the smaller index), read with edge clamping;
// antialias widens the linear/cubic kernels by 1/scale when downsampling.
// Nearest mode is a pure index gather, exact for every dtype.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/resize_plan.h"
#include "ops/tensor_ops.h"

namespace kiln::ref {
namespace {

using Outs = absl::StatusOr<std::vector<Tensor>>;

struct ResizeAttrs {
  std::string mode = "nearest";
  std::string coord = "half_pixel";
  std::string nearest_mode = "round_prefer_floor";
  std::string policy = "stretch";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0.0;
  bool antialias = false;
  std::vector<int64_t> axes;  // normalized; all dims when the attribute is absent
};

// One input axis: its input and output lengths, the scale used by the coordinate
// transform, and the roi (only read by tf_crop_and_resize).
struct AxisMap {
  int64_t in = 0, out = 0;
  double scale = 1.0;
  double roi_start = 0.0, roi_end = 1.0;
  bool resized = false;
};

bool OneOf(const std::string& s, std::initializer_list<const char*> options) {
  for (const char* o : options) {
    if (s == o) return true;
  }
  return false;
}

absl::StatusOr<ResizeAttrs> ReadAttrs(const Node& node, int64_t rank) {
  ResizeAttrs a;
  a.mode = node.GetString("mode", a.mode);
  a.coord = node.GetString("coordinate_transformation_mode", a.coord);
  a.nearest_mode = node.GetString("nearest_mode", a.nearest_mode);
  a.policy = node.GetString("keep_aspect_ratio_policy", a.policy);
  a.cubic_a = node.GetFloat("cubic_coeff_a", -0.75f);
  a.exclude_outside = node.GetInt("exclude_outside", 0) != 0;
  a.extrapolation = node.GetFloat("extrapolation_value", 0.0f);
  a.antialias = node.GetInt("antialias", 0) != 0;
  if (!OneOf(a.mode, {"nearest", "linear", "cubic"})) {
    return InvalidInput(node, "unknown mode '" + a.mode + "'");
  }
  if (!OneOf(a.coord, {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                       "asymmetric", "tf_crop_and_resize"})) {
    return InvalidInput(node, "unknown coordinate_transformation_mode '" + a.coord + "'");
  }
  if (!OneOf(a.nearest_mode, {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"})) {
    return InvalidInput(node, "unknown nearest_mode '" + a.nearest_mode + "'");
  }
  if (!OneOf(a.policy, {"stretch", "not_larger", "not_smaller"})) {
    return InvalidInput(node, "unknown keep_aspect_ratio_policy '" + a.policy + "'");
  }
  std::vector<int64_t> axes(rank);
  std::iota(axes.begin(), axes.end(), 0);
  if (node.HasAttr("axes")) axes = node.GetInts("axes");
  ASSIGN_OR_RETURN(a.axes, NormalizeAxes(node, axes, rank));
  return a;
}

// A present, non-empty optional input (Resize allows both omitted and empty tensors).
const Tensor* Present(const KernelInputs& in, size_t i) {
  return i < in.size() && in[i] && in[i]->numel() > 0 ? in[i] : nullptr;
}

absl::Status SizesToAxes(const Node& node, const ResizeAttrs& a, const std::vector<int64_t>& sizes,
                         std::vector<AxisMap>& maps) {
  for (int64_t s : sizes) {
    if (s < 0) return InvalidInput(node, "sizes must be non-negative");
  }
  // keep_aspect_ratio_policy: one common scale for every listed axis.
  double common = a.policy == "not_larger" ? INFINITY : 0.0;
  for (size_t k = 0; k < a.axes.size(); ++k) {
    AxisMap& m = maps[a.axes[k]];
    double s = m.in > 0 ? static_cast<double>(sizes[k]) / m.in : 1.0;
    common = a.policy == "not_larger" ? std::min(common, s) : std::max(common, s);
    m.out = sizes[k];
    m.scale = s;
  }
  if (a.policy == "stretch") return absl::OkStatus();
  for (int64_t axis : a.axes) {
    AxisMap& m = maps[axis];
    m.scale = common;
    const double len = std::round(common * m.in);
    if (!(len < static_cast<double>(kMaxOutputElements))) {
      return absl::ResourceExhaustedError(node.Describe() + ": resized output is too large");
    }
    m.out = static_cast<int64_t>(len);
  }
  return absl::OkStatus();
}

absl::Status ScalesToAxes(const Node& node, const ResizeAttrs& a, const std::vector<double>& sc,
                          std::vector<AxisMap>& maps) {
  for (size_t k = 0; k < a.axes.size(); ++k) {
    AxisMap& m = maps[a.axes[k]];
    if (!(sc[k] > 0.0) || !std::isfinite(sc[k])) {
      return InvalidInput(node, "scales must be positive and finite");
    }
    double len = m.in * sc[k];
    if (a.coord == "tf_crop_and_resize") len *= m.roi_end - m.roi_start;
    if (!(len < static_cast<double>(kMaxOutputElements)) || len < 0) {
      return absl::ResourceExhaustedError(node.Describe() + ": resized output is too large");
    }
    m.out = static_cast<int64_t>(std::floor(len));
    m.scale = sc[k];
  }
  return absl::OkStatus();
}

// Output lengths and per-axis scales from scales or sizes (exactly one must be given).
absl::StatusOr<std::vector<AxisMap>> PlanAxes(const Node& node, const ResizeAttrs& a,
                                              const std::vector<int64_t>& shape,
                                              const KernelInputs& in) {
  std::vector<AxisMap> maps(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) maps[d].in = maps[d].out = shape[d];
  const size_t n = a.axes.size();
  if (const Tensor* roi = Present(in, 1)) {
    if (roi->numel() != static_cast<int64_t>(2 * n)) {
      return InvalidInput(node, "roi must have 2 entries per resized axis");
    }
    for (size_t k = 0; k < n; ++k) {
      maps[a.axes[k]].roi_start = roi->GetDouble(k);
      maps[a.axes[k]].roi_end = roi->GetDouble(k + n);
    }
  }
  const Tensor* scales = Present(in, 2);
  const Tensor* sizes = Present(in, 3);
  if ((scales != nullptr) == (sizes != nullptr)) {
    return InvalidInput(node, "exactly one of scales and sizes must be given");
  }
  const Tensor* given = scales ? scales : sizes;
  if (given->numel() != static_cast<int64_t>(n)) {
    return InvalidInput(node, "scales/sizes must have one entry per resized axis");
  }
  if (sizes) {
    ASSIGN_OR_RETURN(std::vector<int64_t> s, ReadInts(node, *sizes, "sizes"));
    RETURN_IF_ERROR(SizesToAxes(node, a, s, maps));
  } else {
    if (!IsFloatDType(scales->dtype())) return InvalidInput(node, "scales must be float");
    RETURN_IF_ERROR(ScalesToAxes(node, a, scales->ToDoubleVector(), maps));
  }
  for (int64_t axis : a.axes) {
    AxisMap& m = maps[axis];
    // Identity axes are skipped; tf_crop_and_resize moves coordinates even at scale 1.
    m.resized = m.in != m.out || m.scale != 1.0 || a.coord == "tf_crop_and_resize";
    if (m.in == 0 && m.out > 0) return InvalidInput(node, "cannot resize an empty axis");
  }
  return maps;
}

// The source coordinate of output position o. `length` is scale * in, unrounded, as the
// ONNX reference uses it.
double SourceCoord(const ResizeAttrs& a, const AxisMap& m, int64_t o) {
  const double x = static_cast<double>(o);
  const double length = m.scale * m.in;
  if (a.coord == "align_corners") return length == 1 ? 0.0 : x * (m.in - 1) / (length - 1);
  if (a.coord == "asymmetric") return x / m.scale;
  if (a.coord == "pytorch_half_pixel") return length == 1 ? -0.5 : (x + 0.5) / m.scale - 0.5;
  if (a.coord == "tf_crop_and_resize") {
    const double span = (m.roi_end - m.roi_start) * (m.in - 1);
    const double base = m.roi_start * (m.in - 1);
    return length == 1 ? base + span / 2 : base + x * span / (length - 1);
  }
  if (a.coord == "half_pixel_symmetric") {
    // Centres the sampled region when the output length was rounded down.
    const double adjustment = std::floor(length) / length;
    const double offset = m.in / 2.0 * (1 - adjustment);
    return offset + (x + 0.5) / m.scale - 0.5;
  }
  return (x + 0.5) / m.scale - 0.5;  // half_pixel
}

bool Outside(const ResizeAttrs& a, const AxisMap& m, double xo) {
  return a.coord == "tf_crop_and_resize" && (xo < 0 || xo > m.in - 1);
}

// Keeps hostile coordinates (huge scales, NaN roi) convertible to int64; every index is
// clamped to the edge afterwards, so this changes no in-range result.
double Tame(double xo, int64_t in) {
  if (!std::isfinite(xo)) return xo > 0 ? static_cast<double>(in) + 4 : -4.0;
  return std::clamp(xo, -4.0, static_cast<double>(in) + 4);
}

int64_t NearestIndex(const ResizeAttrs& a, double xo, int64_t in) {
  xo = Tame(xo, in);
  double fl = std::floor(xo);
  double r = xo - fl;
  int64_t i = static_cast<int64_t>(fl);
  if (r > 0) {
    const std::string& nm = a.nearest_mode;
    bool up = nm == "ceil" || (nm == "round_prefer_ceil" && r >= 0.5) ||
              (nm == "round_prefer_floor" && r > 0.5);
    if (up) ++i;
  }
  return std::clamp<int64_t>(i, 0, in - 1);
}

struct Tap {
  int64_t index;
  double weight;
};

// The cubic convolution kernel (Keys, with coefficient A) at distance |x|.
double CubicKernel(double x, double A) {
  x = std::abs(x);
  if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
  if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  return 0.0;
}

// Linear/cubic taps for source coordinate xo. With antialias the kernel is stretched by
// 1/scale when downsampling (s < 1), which widens it to more than 2 (or 4) taps.
std::vector<Tap> InterpTaps(const ResizeAttrs& a, const AxisMap& m, double xo) {
  xo = Tame(xo, m.in);
  // An integer coordinate counts as ratio 1 from the index below it, as in the reference.
  const double base = xo == std::floor(xo) ? xo - 1 : std::floor(xo);
  const double ratio = xo - base;
  const bool cubic = a.mode == "cubic";
  const double s = a.antialias ? std::min(m.scale, 1.0) : 1.0;
  const int64_t first = static_cast<int64_t>(std::floor((cubic ? -2.0 : -1.0) / s)) + 1;
  const int64_t count = 2 - 2 * first;
  std::vector<Tap> taps;
  double sum = 0.0;
  for (int64_t k = 0; k < count; ++k) {
    const double d = (first + k - ratio) * s;
    const int64_t idx = static_cast<int64_t>(base) + first + k;
    double w = cubic ? CubicKernel(d, a.cubic_a) : std::max(0.0, 1 - std::abs(d));
    if (a.exclude_outside && (idx < 0 || idx >= m.in)) w = 0.0;
    sum += w;
    taps.push_back({std::clamp<int64_t>(idx, 0, m.in - 1), w});
  }
  if (sum != 0.0) {
    for (Tap& t : taps) t.weight /= sum;
  }
  return taps;
}

// Interpolates along one axis of a row-major double buffer.
std::vector<double> ResizeAxis(const ResizeAttrs& a, const std::vector<double>& src,
                               std::vector<int64_t>& shape, int64_t axis, const AxisMap& m) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  std::vector<double> dst(static_cast<size_t>(outer * m.out * inner));
  for (int64_t j = 0; j < m.out; ++j) {
    const double xo = SourceCoord(a, m, j);
    const bool outside = Outside(a, m, xo);
    const std::vector<Tap> taps = outside ? std::vector<Tap>{} : InterpTaps(a, m, xo);
    for (int64_t o = 0; o < outer; ++o) {
      double* out = &dst[(o * m.out + j) * inner];
      for (int64_t i = 0; i < inner; ++i) out[i] = outside ? a.extrapolation : 0.0;
      for (const Tap& t : taps) {
        const double* in = &src[(o * m.in + t.index) * inner];
        for (int64_t i = 0; i < inner; ++i) out[i] += t.weight * in[i];
      }
    }
  }
  shape[axis] = m.out;
  return dst;
}

// Shrinking axes go first so no intermediate is larger than both the input and the output.
std::vector<int64_t> AxisOrder(const std::vector<AxisMap>& maps) {
  std::vector<int64_t> order;
  for (int64_t d = 0; d < static_cast<int64_t>(maps.size()); ++d) {
    if (maps[d].resized && maps[d].out <= maps[d].in) order.push_back(d);
  }
  for (int64_t d = 0; d < static_cast<int64_t>(maps.size()); ++d) {
    if (maps[d].resized && maps[d].out > maps[d].in) order.push_back(d);
  }
  return order;
}

Tensor ResizeInterp(const ResizeAttrs& a, const Tensor& x, const std::vector<AxisMap>& maps) {
  std::vector<double> buf = x.ToDoubleVector();
  std::vector<int64_t> shape = x.shape();
  for (int64_t d : AxisOrder(maps)) buf = ResizeAxis(a, buf, shape, d, maps[d]);
  Tensor y(x.dtype(), shape);
  const bool integral = !IsFloatDType(x.dtype()) && x.dtype() != DType::kBool;
  for (int64_t i = 0; i < y.numel(); ++i) {
    // Integers round to nearest and saturate (a weighted average never needs to wrap).
    if (integral) {
      StoreFloatAsInt(std::round(buf[i]), y, i);
    } else {
      y.SetDouble(i, buf[i]);
    }
  }
  return y;
}

absl::StatusOr<Tensor> ResizeNearest(const Node& node, const ResizeAttrs& a, const Tensor& x,
                                     const std::vector<AxisMap>& maps) {
  // Per axis: the source index of each output position, or -1 to extrapolate.
  std::vector<std::vector<int64_t>> index(maps.size());
  std::vector<int64_t> out(maps.size());
  for (size_t d = 0; d < maps.size(); ++d) {
    const AxisMap& m = maps[d];
    out[d] = m.out;
    for (int64_t j = 0; j < m.out; ++j) {
      if (!m.resized) {
        index[d].push_back(j);
        continue;
      }
      const double xo = SourceCoord(a, m, j);
      index[d].push_back(Outside(a, m, xo) ? -1 : NearestIndex(a, xo, m.in));
    }
  }
  Tensor fill = Tensor::Scalar(x.dtype(), a.extrapolation);
  std::vector<int64_t> strides = Strides(x.shape());
  return GatherElements(
      node, x, out,
      [&](const std::vector<int64_t>& c) -> int64_t {
        int64_t s = 0;
        for (size_t d = 0; d < c.size(); ++d) {
          if (index[d][c[d]] < 0) return -1;
          s += index[d][c[d]] * strides[d];
        }
        return s;
      },
      &fill);
}

absl::StatusOr<Tensor> RunResize(const Node& node, const ResizeAttrs& a, const Tensor& x,
                                 const std::vector<AxisMap>& maps) {
  std::vector<int64_t> out;
  for (const AxisMap& m : maps) out.push_back(m.out);
  RETURN_IF_ERROR(CheckOutputShape(node, out));
  if (a.mode == "nearest") return ResizeNearest(node, a, x, maps);
  return ResizeInterp(a, x, maps);
}

Outs ResizeKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  ASSIGN_OR_RETURN(ResizeAttrs a, ReadAttrs(node, x->rank()));
  ASSIGN_OR_RETURN(std::vector<AxisMap> maps, PlanAxes(node, a, x->shape(), in));
  ASSIGN_OR_RETURN(Tensor y, RunResize(node, a, *x, maps));
  return std::vector<Tensor>{y};
}

// Upsample (opset 7-9, deprecated): Resize with asymmetric coordinates and floor rounding,
// scales from input 1 (opset 9) or the `scales` attribute (opset 7).
Outs UpsampleKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  ResizeAttrs a;
  a.mode = node.GetString("mode", "nearest");
  if (a.mode == "bilinear") a.mode = "linear";
  if (a.mode != "nearest" && a.mode != "linear") {
    return InvalidInput(node, "unknown mode '" + a.mode + "'");
  }
  a.coord = "asymmetric";
  a.nearest_mode = "floor";
  a.axes.resize(x->rank());
  std::iota(a.axes.begin(), a.axes.end(), 0);
  std::vector<double> scales;
  if (in.size() > 1 && in[1]) {
    scales = in[1]->ToDoubleVector();
  } else {
    for (float f : node.GetFloats("scales")) scales.push_back(f);
  }
  if (static_cast<int64_t>(scales.size()) != x->rank()) {
    return InvalidInput(node, "scales must have one entry per input dimension");
  }
  std::vector<AxisMap> maps(x->rank());
  for (int64_t d = 0; d < x->rank(); ++d) maps[d].in = x->dim(d);
  RETURN_IF_ERROR(ScalesToAxes(node, a, scales, maps));
  for (AxisMap& m : maps) m.resized = m.in != m.out || m.scale != 1.0;
  ASSIGN_OR_RETURN(Tensor y, RunResize(node, a, *x, maps));
  return std::vector<Tensor>{y};
}

}  // namespace

void RegisterResizeKernels(KernelRegistry& r) {
  r.Register("", "Resize", ResizeKernel);
  r.Register("", "Upsample", UpsampleKernel);
}

absl::StatusOr<ResizePlan> PlanResize(const Node& node, const std::vector<int64_t>& shape,
                                      const KernelInputs& in) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  ASSIGN_OR_RETURN(ResizeAttrs a, ReadAttrs(node, rank));
  ASSIGN_OR_RETURN(std::vector<AxisMap> maps, PlanAxes(node, a, shape, in));
  std::vector<int64_t> out;
  for (const AxisMap& m : maps) out.push_back(m.out);
  RETURN_IF_ERROR(CheckOutputShape(node, out));
  ResizePlan plan;
  plan.nearest = a.mode == "nearest";
  plan.extrapolation = a.extrapolation;
  plan.order = AxisOrder(maps);
  for (const AxisMap& m : maps) {
    ResizeAxisPlan p{m.in, m.out, m.resized, {}};
    for (int64_t j = 0; m.resized && j < m.out; ++j) {
      const double xo = SourceCoord(a, m, j);
      std::vector<ResizeTap> taps;
      if (!Outside(a, m, xo)) {
        if (plan.nearest) {
          taps.push_back({NearestIndex(a, xo, m.in), 1.0});
        } else {
          for (const Tap& t : InterpTaps(a, m, xo)) taps.push_back({t.index, t.weight});
        }
      }
      p.taps.push_back(std::move(taps));
    }
    plan.axes.push_back(std::move(p));
  }
  return plan;
}

}  // namespace kiln::ref
