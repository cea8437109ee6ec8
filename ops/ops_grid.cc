// GridSample (opsets 16-22: nearest/linear/cubic over any number of spatial dims, zeros/border/
// reflection padding, align_corners) and AffineGrid (opset 20: the sampling grid of a batch
// of 2-D or 3-D affine transforms).
//
// GridSample follows ONNX's reference, which follows PyTorch: the grid's last axis holds
// (x, y[, z]) for the spatial dims in reverse order, normalized to [-1, 1]. A coordinate is
// denormalized, rounded half to even for nearest (in 3-D too, as ONNX's data has it), and
// when outside the border range clamped (border) or reflected (reflection). Linear and cubic
// (Keys, a = -0.75) interpolation are separable, so a sample is the sum over the 2^r / 4^r
// neighbours of the product of the per-dim weights; each neighbour index is mapped by the
// padding mode (zeros: outside reads 0).
#include <cmath>

#include "ops/kernel_util.h"
#include "ops/nn_ops.h"

namespace kiln::ref::nn {
namespace {

enum class Pad { kZeros, kBorder, kReflection };

struct GridOptions {
  std::string mode;  // nearest, linear, cubic
  Pad pad = Pad::kZeros;
  bool align = false;
};

absl::StatusOr<GridOptions> ReadGridOptions(const Node& node) {
  GridOptions o;
  o.mode = node.GetString("mode", node.opset >= 20 ? "linear" : "bilinear");
  if (o.mode == "bilinear") o.mode = "linear";
  if (o.mode == "bicubic") o.mode = "cubic";
  if (o.mode != "nearest" && o.mode != "linear" && o.mode != "cubic") {
    return InvalidInput(node, "unknown mode '" + o.mode + "'");
  }
  const std::string pad = node.GetString("padding_mode", "zeros");
  if (pad == "zeros") {
    o.pad = Pad::kZeros;
  } else if (pad == "border") {
    o.pad = Pad::kBorder;
  } else if (pad == "reflection") {
    o.pad = Pad::kReflection;
  } else {
    return InvalidInput(node, "unknown padding_mode '" + pad + "'");
  }
  o.align = node.GetInt("align_corners", 0) != 0;
  return o;
}

// Reflects x into [lo, hi] by folding at the nearer border repeatedly.
double Reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const double n = std::trunc(dx / range), r = dx - n * range;
    return std::fmod(n, 2.0) == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi;
    const double n = std::trunc(dx / range), r = dx - n * range;
    return std::fmod(n, 2.0) == 0 ? hi - r : lo + r;
  }
  return x;
}

// One spatial dim's geometry: its size and the border range of its coordinates.
struct Axis {
  int64_t size = 0;
  double lo = 0, hi = 0;
};

// An integer index mapped by the padding mode; -1 when it reads zero.
int64_t MapIndex(int64_t i, const Axis& a, Pad pad) {
  if (pad == Pad::kZeros) return i >= 0 && i < a.size ? i : -1;
  if (pad == Pad::kBorder) return std::clamp<int64_t>(i, 0, a.size - 1);
  const auto r = static_cast<int64_t>(Reflect(static_cast<double>(i), a.lo, a.hi));
  return std::clamp<int64_t>(r, 0, a.size - 1);
}

void CubicWeights(double t, double w[4]) {
  constexpr double a = -0.75;
  auto near = [](double x) { return ((a + 2) * x - (a + 3)) * x * x + 1; };
  auto far = [](double x) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; };
  w[0] = far(t + 1);
  w[1] = near(t);
  w[2] = near(1 - t);
  w[3] = far(2 - t);
}

// The neighbours (index, weight) of coordinate x along one axis for the mode.
void Neighbours(double x, const Axis& a, const GridOptions& o, std::vector<int64_t>& idx,
                std::vector<double>& w) {
  idx.clear();
  w.clear();
  if (o.mode == "nearest") {
    idx.push_back(MapIndex(static_cast<int64_t>(x), a, o.pad));
    w.push_back(1.0);
    return;
  }
  const double f = std::floor(x), t = x - f;
  const auto x0 = static_cast<int64_t>(f);
  if (o.mode == "linear") {
    idx = {MapIndex(x0, a, o.pad), MapIndex(x0 + 1, a, o.pad)};
    w = {1 - t, t};
    return;
  }
  double cw[4];
  CubicWeights(t, cw);
  for (int k = 0; k < 4; ++k) {
    idx.push_back(MapIndex(x0 - 1 + k, a, o.pad));
    w.push_back(cw[k]);
  }
}

// The sampling coordinate along one axis from a normalized grid value.
double Coordinate(double g, const Axis& a, const GridOptions& o) {
  double x = o.align ? (g + 1) / 2 * (a.size - 1) : ((g + 1) * a.size - 1) / 2;
  if (o.mode == "nearest") x = std::nearbyint(x);  // half to even, as the test data rounds
  if (x < a.lo || x > a.hi) {
    if (o.pad == Pad::kBorder) x = std::clamp(x, 0.0, static_cast<double>(a.size - 1));
    if (o.pad == Pad::kReflection) x = Reflect(x, a.lo, a.hi);
  }
  return x;
}

// One output sample of one (n, c) plane at grid point `g` (r normalized values, x first).
double Sample(const double* plane, const std::vector<Axis>& axes, const double* g,
              const GridOptions& o) {
  const int64_t r = static_cast<int64_t>(axes.size());
  std::vector<std::vector<int64_t>> idx(r);
  std::vector<std::vector<double>> w(r);
  for (int64_t d = 0; d < r; ++d) {
    double x = Coordinate(g[r - 1 - d], axes[d], o);
    if (!std::isfinite(x)) return NAN;
    // Far outside, every neighbour reads the same as a few pixels out; this keeps the
    // integer conversions in range.
    x = std::clamp(x, axes[d].lo - 8.0, axes[d].hi + 8.0);
    Neighbours(x, axes[d], o, idx[d], w[d]);
  }
  const int64_t k = static_cast<int64_t>(idx[0].size());
  int64_t combos = 1;
  for (int64_t d = 0; d < r; ++d) combos *= k;
  double sum = 0.0;
  for (int64_t m = 0; m < combos; ++m) {
    double weight = 1.0;
    int64_t flat = 0;
    for (int64_t d = 0, rest = m; d < r; ++d, rest /= k) {
      const int64_t j = rest % k, i = idx[d][j];
      if (i < 0) flat = -1;
      if (flat >= 0) flat = flat * axes[d].size + i;
      weight *= w[d][j];
    }
    sum += flat < 0 ? 0.0 * weight : weight * plane[flat];
  }
  return sum;
}

absl::StatusOr<std::vector<Tensor>> GridSample(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* grid, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckFloat(node, *x));
  RETURN_IF_ERROR(CheckFloat(node, *grid));
  ASSIGN_OR_RETURN(GridOptions o, ReadGridOptions(node));
  const int64_t r = x->rank() - 2;
  if (r < 1 || grid->rank() != r + 2 || grid->dim(0) != x->dim(0) || grid->dim(r + 1) != r) {
    return InvalidInput(node, "X (N, C, D1..Dr) and Grid (N, O1..Or, r) do not fit: " +
                                  ShapeToString(x->shape()) + ", " + ShapeToString(grid->shape()));
  }
  if (o.mode == "cubic" && r > 2) return Unsupported(node, "cubic mode beyond 2-D");
  std::vector<Axis> axes(r);
  for (int64_t d = 0; d < r; ++d) {
    axes[d].size = x->dim(d + 2);
    axes[d].lo = o.align ? 0.0 : -0.5;
    axes[d].hi = o.align ? axes[d].size - 1.0 : axes[d].size - 0.5;
  }
  std::vector<int64_t> out_shape{x->dim(0), x->dim(1)};
  for (int64_t d = 1; d <= r; ++d) out_shape.push_back(grid->dim(d));
  const int64_t n = x->dim(0), c = x->dim(1),
                points = NumElements(out_shape) / std::max<int64_t>(1, n * c);
  const int64_t plane = NumElements(x->shape()) / std::max<int64_t>(1, n * c);
  const std::vector<double> xv = ToDoubles(*x), gv = ToDoubles(*grid);
  std::vector<double> y(NumElements(out_shape));
  for (int64_t i = 0; i < n * c; ++i) {
    for (int64_t p = 0; p < points; ++p) {
      y[i * points + p] =
          Sample(xv.data() + i * plane, axes, gv.data() + (i / c * points + p) * r, o);
    }
  }
  return std::vector<Tensor>{FromDoubles(x->dtype(), out_shape, y)};
}

// Evenly spaced normalized coordinates of `len` pixels: corners at -1 and 1 (align_corners),
// else pixel centres.
double BaseCoordinate(int64_t i, int64_t len, bool align) {
  if (align) return len == 1 ? -1.0 : -1.0 + 2.0 * static_cast<double>(i) / (len - 1);
  return (2.0 * static_cast<double>(i) + 1.0) / len - 1.0;
}

absl::StatusOr<std::vector<Tensor>> AffineGrid(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* theta, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* size_t_, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckFloat(node, *theta));
  const std::vector<int64_t> size = size_t_->ToInt64Vector();
  const int64_t r = static_cast<int64_t>(size.size()) - 2;
  if ((r != 2 && r != 3) || theta->rank() != 3 || theta->dim(0) != size[0] || theta->dim(1) != r ||
      theta->dim(2) != r + 1) {
    return InvalidInput(node, "theta must be (N, r, r + 1) for a size of (N, C, r dims)");
  }
  std::vector<int64_t> out_shape{size[0]};
  for (int64_t d = 0; d < r; ++d) out_shape.push_back(size[2 + d]);
  out_shape.push_back(r);
  ASSIGN_OR_RETURN(int64_t total, CheckedNumel(node, out_shape));
  const bool align = node.GetInt("align_corners", 0) != 0;
  const std::vector<double> th = ToDoubles(*theta);
  std::vector<double> y(total);
  const int64_t points = size[0] == 0 ? 0 : total / (size[0] * r);
  for (int64_t b = 0; b < size[0]; ++b) {
    for (int64_t p = 0; p < points; ++p) {
      std::vector<double> base(r + 1, 1.0);  // (x, y[, z], 1): x along the last dim
      int64_t rest = p;
      for (int64_t d = 0; d < r; ++d) {
        const int64_t len = size[1 + r - d];  // W, then H, then D
        base[d] = BaseCoordinate(rest % len, len, align);
        rest /= len;
      }
      for (int64_t k = 0; k < r; ++k) {
        double v = 0.0;
        for (int64_t j = 0; j <= r; ++j) v += th[(b * r + k) * (r + 1) + j] * base[j];
        y[(b * points + p) * r + k] = v;
      }
    }
  }
  return std::vector<Tensor>{FromDoubles(theta->dtype(), out_shape, y)};
}

}  // namespace

void RegisterGridKernels(KernelRegistry& r) {
  r.Register("", "GridSample", GridSample);
  r.Register("", "AffineGrid", AffineGrid);
}

}  // namespace kiln::ref::nn
