// Pooling: AveragePool, MaxPool (with optional Indices), LpPool and the global pools. Each
// output element walks its window's taps that fall inside the input; padding never
// contributes a value (AveragePool's count_include_pad only changes the divisor).
#include <cmath>
#include <limits>

#include "ops/kernel_util.h"
#include "ops/nn_ops.h"
#include "ops/nn_window.h"

namespace kiln::ref::nn {
namespace {

enum class PoolKind { kMax, kAvg, kLp };

struct PoolParams {
  PoolKind kind = PoolKind::kMax;
  bool count_include_pad = false;
  double p = 2.0;
  bool column_major = false;  // MaxPool storage_order=1 for Indices
};

// Taps of one window along each dim: [lo, hi) of kernel indices inside the input, and how
// many lie inside the input-plus-explicit-pads region (count_include_pad's divisor).
struct Taps {
  int64_t lo[3], hi[3];
  double padded_count = 1.0;  // double: a product of hostile kernel sizes could overflow
};

Taps WindowTaps(const Win3& g, const int64_t pos[3]) {
  Taps t;
  for (int i = 0; i < 3; ++i) {
    const int64_t start = pos[i] * g.s[i] - g.pb[i];
    ValidRange(start, g.d[i], g.k[i], g.in[i], t.lo[i], t.hi[i]);
    int64_t plo, phi;
    ValidRange(start + g.pb[i], g.d[i], g.k[i], g.in[i] + g.pb[i] + g.pe[i], plo, phi);
    t.padded_count *= static_cast<double>(phi - plo);
  }
  return t;
}

// Reduces one window of `plane`; *arg receives the spatial index of the max (MaxPool).
double PoolOne(const double* plane, const Win3& g, const int64_t pos[3], const PoolParams& p,
               int64_t* arg) {
  const Taps t = WindowTaps(g, pos);
  double acc = p.kind == PoolKind::kMax ? -std::numeric_limits<double>::infinity() : 0.0;
  int64_t count = 0, best = -1;
  for (int64_t kd = t.lo[0]; kd < t.hi[0]; ++kd) {
    const int64_t id = pos[0] * g.s[0] - g.pb[0] + kd * g.d[0];
    for (int64_t kh = t.lo[1]; kh < t.hi[1]; ++kh) {
      const int64_t ih = pos[1] * g.s[1] - g.pb[1] + kh * g.d[1];
      for (int64_t kw = t.lo[2]; kw < t.hi[2]; ++kw) {
        const int64_t iw = pos[2] * g.s[2] - g.pb[2] + kw * g.d[2];
        const int64_t idx = (id * g.in[1] + ih) * g.in[2] + iw;
        const double v = plane[idx];
        ++count;
        if (p.kind == PoolKind::kAvg) {
          acc += v;
        } else if (p.kind == PoolKind::kLp) {
          acc += std::pow(std::fabs(v), p.p);
        } else if (best < 0 || v > acc || std::isnan(v)) {
          if (std::isnan(acc)) continue;  // NaN propagates, first one wins
          acc = v;
          best = p.column_major ? id + ih * g.in[0] + iw * g.in[0] * g.in[1] : idx;
        }
      }
    }
  }
  if (arg) *arg = best;
  if (p.kind == PoolKind::kAvg) {
    return acc / (p.count_include_pad ? t.padded_count : static_cast<double>(count));
  }
  if (p.kind == PoolKind::kLp) return std::pow(acc, 1.0 / p.p);
  return acc;
}

absl::StatusOr<PoolParams> ReadParams(const Node& node, const Tensor& x, PoolKind kind) {
  PoolParams p;
  p.kind = kind;
  if (kind == PoolKind::kMax) {
    RETURN_IF_ERROR(CheckNumeric(node, x));
  } else {
    RETURN_IF_ERROR(CheckFloat(node, x));
  }
  p.count_include_pad = node.GetInt("count_include_pad", 0) != 0;
  int64_t order = node.GetInt("storage_order", 0);
  if (order != 0 && order != 1) return InvalidInput(node, "storage_order must be 0 or 1");
  p.column_major = order == 1;
  int64_t lp = node.GetInt("p", 2);
  if (lp < 1 || lp > 1024) return InvalidInput(node, "p must be a positive integer");
  p.p = static_cast<double>(lp);
  return p;
}

absl::StatusOr<std::vector<Tensor>> Pool(const Node& node, const KernelInputs& in, PoolKind kind) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(PoolParams params, ReadParams(node, *x, kind));
  if (x->rank() < 3) return InvalidInput(node, "X must have rank >= 3");
  std::vector<int64_t> spatial(x->shape().begin() + 2, x->shape().end());
  ASSIGN_OR_RETURN(std::vector<int64_t> kernel, KernelShape(node, spatial.size(), nullptr));
  ASSIGN_OR_RETURN(Window win, ConvWindow(node, spatial, kernel));
  ASSIGN_OR_RETURN(Win3 g, To3D(node, win));
  std::vector<int64_t> out_shape{x->dim(0), x->dim(1)};
  out_shape.insert(out_shape.end(), win.out.begin(), win.out.end());
  RETURN_IF_ERROR(CheckedNumel(node, out_shape).status());

  const std::vector<double> xd = ToDoubles(*x);
  const int64_t planes = x->dim(0) * x->dim(1);
  std::vector<double> y(static_cast<size_t>(planes * g.out_size()));
  const bool want_indices = kind == PoolKind::kMax && node.output(1) != nullptr;
  Tensor indices = want_indices ? Tensor(DType::kInt64, out_shape) : Tensor();
  int64_t o = 0;
  for (int64_t pl = 0; pl < planes; ++pl) {
    const double* plane = xd.data() + pl * g.in_size();
    int64_t pos[3];
    for (pos[0] = 0; pos[0] < g.out[0]; ++pos[0]) {
      for (pos[1] = 0; pos[1] < g.out[1]; ++pos[1]) {
        for (pos[2] = 0; pos[2] < g.out[2]; ++pos[2], ++o) {
          int64_t arg = -1;
          y[o] = PoolOne(plane, g, pos, params, want_indices ? &arg : nullptr);
          if (want_indices) indices.mutable_data<int64_t>()[o] = pl * g.in_size() + arg;
        }
      }
    }
  }
  std::vector<Tensor> outs{FromDoubles(x->dtype(), out_shape, y)};
  if (want_indices) outs.push_back(std::move(indices));
  return outs;
}

// Global pools: one window covering every spatial element of each (n, c) plane.
absl::StatusOr<std::vector<Tensor>> GlobalPool(const Node& node, const KernelInputs& in,
                                               PoolKind kind) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(PoolParams params, ReadParams(node, *x, kind));
  if (x->rank() < 2) return InvalidInput(node, "X must have rank >= 2");
  std::vector<int64_t> out_shape(x->shape().size(), 1);
  out_shape[0] = x->dim(0);
  out_shape[1] = x->dim(1);
  const int64_t planes = x->dim(0) * x->dim(1);
  const int64_t size = planes == 0 ? 0 : x->numel() / planes;
  const std::vector<double> xd = ToDoubles(*x);
  std::vector<double> y(static_cast<size_t>(planes));
  for (int64_t pl = 0; pl < planes; ++pl) {
    const double* v = xd.data() + pl * size;
    double acc = kind == PoolKind::kMax ? -std::numeric_limits<double>::infinity() : 0.0;
    for (int64_t i = 0; i < size; ++i) {
      if (kind == PoolKind::kAvg) acc += v[i];
      if (kind == PoolKind::kLp) acc += std::pow(std::fabs(v[i]), params.p);
      if (kind == PoolKind::kMax && (v[i] > acc || std::isnan(v[i])) && !std::isnan(acc)) {
        acc = v[i];
      }
    }
    if (kind == PoolKind::kAvg) acc /= static_cast<double>(size);
    if (kind == PoolKind::kLp) acc = std::pow(acc, 1.0 / params.p);
    y[pl] = acc;
  }
  return std::vector<Tensor>{FromDoubles(x->dtype(), out_shape, y)};
}

}  // namespace

void RegisterPoolKernels(KernelRegistry& r) {
  auto pool = [](PoolKind k) {
    return [k](const Node& n, const KernelInputs& in) { return Pool(n, in, k); };
  };
  auto global = [](PoolKind k) {
    return [k](const Node& n, const KernelInputs& in) { return GlobalPool(n, in, k); };
  };
  r.Register("", "MaxPool", pool(PoolKind::kMax));
  r.Register("", "AveragePool", pool(PoolKind::kAvg));
  r.Register("", "LpPool", pool(PoolKind::kLp));
  r.Register("", "GlobalMaxPool", global(PoolKind::kMax));
  r.Register("", "GlobalAveragePool", global(PoolKind::kAvg));
  r.Register("", "GlobalLpPool", global(PoolKind::kLp));
}

}  // namespace kiln::ref::nn
