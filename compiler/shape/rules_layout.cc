// Shape rules for layout operators: Transpose, Concat, Split, Slice, Pad, DepthToSpace,
// SpaceToDepth, Resize, Upsample. Symbolic dims pass through wherever the operator leaves
// that axis alone; constant operands (split sizes, slice bounds, pads, scales/sizes) give
// exact dims.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "compiler/shape/shape_util.h"
#include "compiler/shape/tensor_rules.h"

namespace kiln::shape {
namespace {

absl::Status TransposeRule(InferContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  std::optional<Shape> s = ctx.input_shape_or_unknown_output(0);
  if (!s) return absl::OkStatus();
  const int64_t rank = static_cast<int64_t>(s->size());
  std::vector<int64_t> perm(rank);
  std::iota(perm.rbegin(), perm.rend(), 0);
  if (ctx.node().HasAttr("perm")) perm = ctx.node().GetInts("perm");
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < static_cast<int64_t>(sorted.size()); ++i) {
    if (static_cast<int64_t>(sorted.size()) != rank || sorted[i] != i) {
      return ctx.Invalid("perm is not a permutation of the input dims");
    }
  }
  Shape out;
  for (int64_t p : perm) out.push_back((*s)[p]);
  ctx.set_output(0, dtype, out);
  return absl::OkStatus();
}

absl::Status ConcatRule(InferContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  std::vector<Shape> shapes;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    std::optional<Shape> s = ctx.input_shape(i);
    if (!s) {
      ctx.set_output(0, dtype, std::nullopt);
      return absl::OkStatus();
    }
    shapes.push_back(*s);
  }
  if (shapes.empty()) return ctx.Invalid("Concat needs at least one input");
  const int64_t rank = static_cast<int64_t>(shapes[0].size());
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().GetInt("axis", 0), rank));
  Shape out = shapes[0];
  std::vector<Dim> along;
  for (const Shape& s : shapes) {
    if (static_cast<int64_t>(s.size()) != rank) return ctx.Invalid("inputs differ in rank");
    for (int64_t d = 0; d < rank; ++d) {
      if (d == axis) continue;
      if (s[d].known() && out[d].known() && s[d].value != out[d].value) {
        return ctx.Invalid("inputs differ in non-axis dim " + std::to_string(d));
      }
      if (!out[d].known() && s[d].known()) out[d] = s[d];  // a known size is more precise
    }
    along.push_back(s[axis]);
  }
  // Zero-length pieces do not change the sum; a lone remaining piece keeps its symbol.
  along.erase(std::remove(along.begin(), along.end(), Dim(0)), along.end());
  int64_t sum = 0;
  bool known = true;
  for (const Dim& d : along) {
    known = known && d.known();
    if (d.known()) sum += d.value;
  }
  out[axis] = along.size() == 1 ? along[0] : known ? Dim(sum) : Dim();
  ctx.set_output(0, dtype, out);
  return absl::OkStatus();
}

// Split sizes when they can be known: the split input, num_outputs, or an even split.
std::optional<std::vector<int64_t>> SplitSizes(const InferContext& ctx, const Dim& dim) {
  const int64_t n = static_cast<int64_t>(ctx.num_outputs());
  if (ctx.has_input(1)) return ConstantInts(ctx, 1);
  if (!dim.known() || n == 0) return std::nullopt;
  std::vector<int64_t> sizes;
  if (ctx.node().HasAttr("num_outputs")) {
    const int64_t chunk = (dim.value + n - 1) / n;
    for (int64_t i = 0, left = dim.value; i < n; ++i, left -= std::min(left, chunk)) {
      sizes.push_back(std::min(left, chunk));
    }
    return sizes;
  }
  if (dim.value % n != 0) return std::nullopt;
  return std::vector<int64_t>(n, dim.value / n);
}

absl::Status SplitRule(InferContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  std::optional<Shape> s = ctx.input_shape(0);
  if (!s) {
    for (size_t i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, dtype, std::nullopt);
    return absl::OkStatus();
  }
  const int64_t rank = static_cast<int64_t>(s->size());
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().GetInt("axis", 0), rank));
  std::optional<std::vector<int64_t>> sizes = SplitSizes(ctx, (*s)[axis]);
  if (sizes && sizes->size() != ctx.num_outputs()) {
    return ctx.Invalid("split has " + std::to_string(sizes->size()) + " sizes for " +
                       std::to_string(ctx.num_outputs()) + " outputs");
  }
  if (sizes && std::any_of(sizes->begin(), sizes->end(), [](int64_t v) { return v < 0; })) {
    return ctx.Invalid("negative split size");
  }
  if (sizes && (*s)[axis].known()) {
    int64_t sum = 0;
    for (int64_t v : *sizes) {
      if (v < 0 || v > (*s)[axis].value) return ctx.Invalid("split size out of range");
      sum += v;
    }
    if (sum != (*s)[axis].value) return ctx.Invalid("split sizes do not sum to the axis size");
  }
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    Shape out = *s;
    out[axis] = sizes ? Dim((*sizes)[i]) : Dim();
    ctx.set_output(i, dtype, out);
  }
  return absl::OkStatus();
}

// One sliced axis: exact when the dim is known, unchanged for a full forward slice.
Dim SliceDim(const Dim& dim, int64_t start, int64_t end, int64_t step) {
  if (!dim.known()) {
    const bool full = step == 1 && start == 0 && end >= (int64_t{1} << 31);
    return full ? dim : Dim();
  }
  const int64_t n = dim.value;
  step = std::clamp<int64_t>(step, -(n + 1), n + 1);  // as the kernel: no overflow
  if (start < 0) start += n;
  if (end < 0) end += n;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, n);
    end = std::clamp<int64_t>(end, 0, n);
    return Dim(end > start ? (end - start + step - 1) / step : 0);
  }
  start = std::clamp<int64_t>(start, 0, n - 1);
  end = std::clamp<int64_t>(end, -1, n - 1);
  return Dim(start > end ? (start - end - step - 1) / (-step) : 0);
}

absl::Status SliceRule(InferContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  std::optional<Shape> s = ctx.input_shape_or_unknown_output(0);
  if (!s) return absl::OkStatus();
  const int64_t rank = static_cast<int64_t>(s->size());
  auto starts = ConstantInts(ctx, 1), ends = ConstantInts(ctx, 2);
  auto axes = OptionalConstInts(ctx, 3), steps = OptionalConstInts(ctx, 4);
  if (!starts || !ends || (ctx.has_input(3) && !axes) || (ctx.has_input(4) && !steps)) {
    ctx.set_output(0, dtype, UnknownDims(rank));  // which axes change is unknown
    return absl::OkStatus();
  }
  if (!axes) {
    axes = std::vector<int64_t>(starts->size());
    std::iota(axes->begin(), axes->end(), 0);
  }
  if (!steps) steps = std::vector<int64_t>(starts->size(), 1);
  if (ends->size() != starts->size() || axes->size() != starts->size() ||
      steps->size() != starts->size()) {
    return ctx.Invalid("starts, ends, axes and steps must have the same length");
  }
  Shape out = *s;
  for (size_t k = 0; k < axes->size(); ++k) {
    ASSIGN_OR_RETURN(int64_t a, NormalizeAxis(ctx, (*axes)[k], rank));
    if ((*steps)[k] == 0) return ctx.Invalid("slice step cannot be 0");
    out[a] = SliceDim((*s)[a], (*starts)[k], (*ends)[k], (*steps)[k]);
  }
  ctx.set_output(0, dtype, out);
  return absl::OkStatus();
}

absl::Status PadRule(InferContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  std::optional<Shape> s = ctx.input_shape_or_unknown_output(0);
  if (!s) return absl::OkStatus();
  const int64_t rank = static_cast<int64_t>(s->size());
  auto pads = ConstantInts(ctx, 1);
  auto axes = OptionalConstInts(ctx, 3);
  if (!pads || (ctx.has_input(3) && !axes)) {
    ctx.set_output(0, dtype, UnknownDims(rank));
    return absl::OkStatus();
  }
  if (!axes) {
    axes = std::vector<int64_t>(rank);
    std::iota(axes->begin(), axes->end(), 0);
  }
  const size_t n = axes->size();
  if (pads->size() != 2 * n) return ctx.Invalid("pads must have 2 entries per padded axis");
  Shape out = *s;
  for (size_t k = 0; k < n; ++k) {
    ASSIGN_OR_RETURN(int64_t a, NormalizeAxis(ctx, (*axes)[k], rank));
    const int64_t lo = (*pads)[k], hi = (*pads)[k + n];
    const int64_t limit = int64_t{1} << 40;  // keeps the sum below from overflowing
    if (lo > limit || hi > limit || lo < -limit || hi < -limit) {
      out[a] = Dim();  // the kernel reports the error
      continue;
    }
    const int64_t delta = lo + hi;
    if (!out[a].known()) {
      if (delta != 0) out[a] = Dim();
      continue;
    }
    if (out[a].value + delta < 0) return ctx.Invalid("pads remove more than the whole axis");
    out[a] = Dim(out[a].value + delta);
  }
  ctx.set_output(0, dtype, out);
  return absl::OkStatus();
}

Dim Scaled(const Dim& d, int64_t mul, int64_t div) {
  if (!d.known()) return Dim();
  return Dim(d.value * mul / div);
}

absl::Status BlockRule(InferContext& ctx, bool to_space) {
  const DType dtype = ctx.input_dtype(0);
  std::optional<Shape> s = ctx.input_shape(0);
  const int64_t b = ctx.node().GetInt("blocksize", 0);
  if (b <= 0 || b > (int64_t{1} << 20)) return ctx.Invalid("invalid blocksize");
  if (!s) {
    ctx.set_output(0, dtype, UnknownDims(4));
    return absl::OkStatus();
  }
  if (s->size() != 4) return ctx.Invalid("input must be 4-D (NCHW)");
  const Shape& x = *s;
  Shape out = to_space ? Shape{x[0], Scaled(x[1], 1, b * b), Scaled(x[2], b, 1), Scaled(x[3], b, 1)}
                       : Shape{x[0], Scaled(x[1], b * b, 1), Scaled(x[2], 1, b), Scaled(x[3], 1, b)};
  ctx.set_output(0, dtype, out);
  return absl::OkStatus();
}


// Present and non-empty (Resize treats an empty constant like an omitted input).
bool GivenInput(const InferContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return false;
  const Tensor* t = ctx.input_constant(i);
  if (t) return t->numel() > 0;
  std::optional<Shape> s = ctx.input_shape(i);
  return !(s && s->size() == 1 && (*s)[0].known() && (*s)[0].value == 0);
}

// Resized dims from constant sizes (with keep_aspect_ratio_policy).
absl::Status DimsFromSizes(const InferContext& ctx, const std::vector<int64_t>& axes,
                           const std::vector<int64_t>& sizes, Shape& out) {
  const std::string policy = ctx.node().GetString("keep_aspect_ratio_policy", "stretch");
  if (policy == "stretch") {
    for (size_t k = 0; k < axes.size(); ++k) out[axes[k]] = Dim(sizes[k]);
    return absl::OkStatus();
  }
  double common = policy == "not_larger" ? INFINITY : 0.0;
  for (size_t k = 0; k < axes.size(); ++k) {
    const Dim& d = out[axes[k]];
    if (!d.known()) {
      for (int64_t a : axes) out[a] = Dim();
      return absl::OkStatus();
    }
    double s = d.value > 0 ? static_cast<double>(sizes[k]) / d.value : 1.0;
    common = policy == "not_larger" ? std::min(common, s) : std::max(common, s);
  }
  for (int64_t a : axes) {
    const double len = std::round(common * out[a].value);
    out[a] = len < 9.0e18 ? Dim(static_cast<int64_t>(len)) : Dim();
  }
  return absl::OkStatus();
}

// Resized dims from constant scales: floor(in * scale), roi-scaled for tf_crop_and_resize.
absl::Status DimsFromScales(const InferContext& ctx, const std::vector<int64_t>& axes,
                            const std::vector<double>& scales, Shape& out) {
  const bool crop = ctx.node().GetString("coordinate_transformation_mode", "") ==
                    "tf_crop_and_resize";
  const Tensor* roi = crop && GivenInput(ctx, 1) ? ctx.input_constant(1) : nullptr;
  for (size_t k = 0; k < axes.size(); ++k) {
    if (!(scales[k] > 0) || !std::isfinite(scales[k])) return ctx.Invalid("invalid scale");
    Dim& d = out[axes[k]];
    double span = 1.0;
    if (roi && roi->numel() == static_cast<int64_t>(2 * axes.size())) {
      span = roi->GetDouble(k + axes.size()) - roi->GetDouble(k);
    } else if (crop && GivenInput(ctx, 1)) {
      d = Dim();  // the roi is computed at run time
      continue;
    }
    if (scales[k] == 1.0 && span == 1.0) continue;  // keeps a symbolic dim
    const double len = d.known() ? std::floor(d.value * scales[k] * span) : -1;
    d = d.known() && len < 9.0e18 ? Dim(static_cast<int64_t>(len)) : Dim();
  }
  return absl::OkStatus();
}

absl::Status ResizeRule(InferContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  std::optional<Shape> s = ctx.input_shape_or_unknown_output(0);
  if (!s) return absl::OkStatus();
  const int64_t rank = static_cast<int64_t>(s->size());
  std::vector<int64_t> axes(rank);
  std::iota(axes.begin(), axes.end(), 0);
  if (ctx.node().HasAttr("axes")) axes = ctx.node().GetInts("axes");
  for (int64_t& a : axes) {
    ASSIGN_OR_RETURN(a, NormalizeAxis(ctx, a, rank));
  }
  Shape out = *s;
  const bool has_scales = GivenInput(ctx, 2), has_sizes = GivenInput(ctx, 3);
  if (has_scales && has_sizes) return ctx.Invalid("only one of scales and sizes may be given");
  const Tensor* given = ctx.input_constant(has_sizes ? 3 : 2);
  if ((!has_scales && !has_sizes) || !given) {
    for (int64_t a : axes) out[a] = Dim();
  } else if (given->numel() != static_cast<int64_t>(axes.size())) {
    return ctx.Invalid("scales/sizes must have one entry per resized axis");
  } else if (has_sizes) {
    RETURN_IF_ERROR(DimsFromSizes(ctx, axes, given->ToInt64Vector(), out));
  } else {
    RETURN_IF_ERROR(DimsFromScales(ctx, axes, given->ToDoubleVector(), out));
  }
  ctx.set_output(0, dtype, out);
  return absl::OkStatus();
}

absl::Status UpsampleRule(InferContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  std::optional<Shape> s = ctx.input_shape_or_unknown_output(0);
  if (!s) return absl::OkStatus();
  std::vector<double> scales;
  if (ctx.has_input(1)) {
    const Tensor* t = ctx.input_constant(1);
    if (!t) {
      ctx.set_output(0, dtype, UnknownDims(s->size()));
      return absl::OkStatus();
    }
    scales = t->ToDoubleVector();
  } else {
    for (float f : ctx.node().GetFloats("scales")) scales.push_back(f);
  }
  if (scales.size() != s->size()) return ctx.Invalid("scales must match the input rank");
  std::vector<int64_t> axes(s->size());
  std::iota(axes.begin(), axes.end(), 0);
  Shape out = *s;
  RETURN_IF_ERROR(DimsFromScales(ctx, axes, scales, out));
  ctx.set_output(0, dtype, out);
  return absl::OkStatus();
}

}  // namespace

void RegisterLayoutRules(RuleRegistry& r) {
  r.Register("", "Transpose", TransposeRule);
  r.Register("", "Concat", ConcatRule);
  r.Register("", "Split", SplitRule);
  r.Register("", "Slice", SliceRule);
  r.Register("", "Pad", PadRule);
  r.Register("", "DepthToSpace", [](InferContext& ctx) { return BlockRule(ctx, true); });
  r.Register("", "SpaceToDepth", [](InferContext& ctx) { return BlockRule(ctx, false); });
  r.Register("", "Resize", ResizeRule);
  r.Register("", "Upsample", UpsampleRule);
}

}  // namespace kiln::shape
