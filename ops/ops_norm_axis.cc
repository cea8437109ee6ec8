// Normalizations along trailing axes or one axis: LayerNormalization, RMSNormalization,
// LpNormalization, MeanVarianceNormalization, and LRN (across channels).
#include <algorithm>
#include <cmath>

#include "ops/kernel_util.h"
#include "ops/nn_ops.h"

namespace kiln::ref::nn {
namespace {

// The stash_type attribute as a float dtype (the dtype of LayerNorm's Mean/InvStdDev).
absl::StatusOr<DType> StashType(const Node& node) {
  const int64_t s = node.GetInt("stash_type", 1);
  if (s < 0 || s > 1000 || !IsValidOnnxDType(static_cast<int32_t>(s)) ||
      !IsFloatDType(static_cast<DType>(s))) {
    return InvalidInput(node, "stash_type " + std::to_string(s) + " is not a float type");
  }
  return static_cast<DType>(s);
}

// Shape of per-row statistics: X's dims before `axis`, then ones.
std::vector<int64_t> StatShape(const std::vector<int64_t>& shape, int64_t axis) {
  std::vector<int64_t> s = shape;
  for (size_t i = static_cast<size_t>(axis); i < s.size(); ++i) s[i] = 1;
  return s;
}

// LayerNormalization (rms = false) and RMSNormalization (rms = true) over dims [axis, rank).
absl::StatusOr<std::vector<Tensor>> AxisNorm(const Node& node, const KernelInputs& in, bool rms) {
  ASSIGN_OR_RETURN(const Tensor* xt, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckFloat(node, *xt));
  ASSIGN_OR_RETURN(const Tensor* st, RequireInput(node, in, 1));
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, node.GetInt("axis", -1), xt->rank()));
  ASSIGN_OR_RETURN(DType stash, StashType(node));
  ASSIGN_OR_RETURN(std::vector<double> scale, BroadcastTo(node, *st, xt->shape()));
  std::vector<double> bias;
  if (!rms && in.size() > 2 && in[2]) {
    ASSIGN_OR_RETURN(bias, BroadcastTo(node, *in[2], xt->shape()));
  }
  const AxisSplit split = SplitAtAxis(xt->shape(), axis);
  const int64_t rows = split.outer, n = xt->numel() / std::max<int64_t>(rows, 1);
  const double eps = node.GetFloat("epsilon", 1e-5f);
  std::vector<double> x = ToDoubles(*xt), means(rows), invs(rows);
  for (int64_t r = 0; r < rows; ++r) {
    double* p = x.data() + r * n;
    double mean = 0.0, sq = 0.0;
    if (!rms) {
      for (int64_t i = 0; i < n; ++i) mean += p[i];
      mean /= static_cast<double>(n);
    }
    for (int64_t i = 0; i < n; ++i) sq += (p[i] - mean) * (p[i] - mean);
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) {
      p[i] = (p[i] - mean) * inv * scale[r * n + i] + (bias.empty() ? 0.0 : bias[r * n + i]);
    }
    means[r] = mean;
    invs[r] = inv;
  }
  std::vector<Tensor> outs{FromDoubles(xt->dtype(), xt->shape(), x)};
  if (!rms) {
    outs.push_back(node.output(1) ? FromDoubles(stash, StatShape(xt->shape(), axis), means)
                                  : Tensor());
    outs.push_back(node.output(2) ? FromDoubles(stash, StatShape(xt->shape(), axis), invs)
                                  : Tensor());
  }
  return outs;
}

absl::StatusOr<std::vector<Tensor>> LpNorm(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* xt, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckFloat(node, *xt));
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, node.GetInt("axis", -1), xt->rank()));
  const int64_t p = node.GetInt("p", 2);
  if (p != 1 && p != 2) return InvalidInput(node, "p must be 1 or 2");
  const AxisSplit s = SplitAtAxis(xt->shape(), axis);
  std::vector<double> x = ToDoubles(*xt);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      double* base = x.data() + o * s.len * s.inner + i;
      double norm = 0.0;
      for (int64_t k = 0; k < s.len; ++k) {
        norm += p == 1 ? std::fabs(base[k * s.inner]) : base[k * s.inner] * base[k * s.inner];
      }
      if (p == 2) norm = std::sqrt(norm);
      if (norm == 0.0) norm = 1.0;  // an all-zero slice stays zero (ONNX reference)
      for (int64_t k = 0; k < s.len; ++k) base[k * s.inner] /= norm;
    }
  }
  return std::vector<Tensor>{FromDoubles(xt->dtype(), xt->shape(), x)};
}

// Local response normalization across channels of X (N, C, ...).
absl::StatusOr<std::vector<Tensor>> Lrn(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* xt, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckFloat(node, *xt));
  if (xt->rank() < 2) return InvalidInput(node, "X must have rank >= 2");
  const int64_t size = node.GetInt("size", 0);
  if (size < 1) return InvalidInput(node, "size must be a positive integer");
  const double alpha = node.GetFloat("alpha", 1e-4f), beta = node.GetFloat("beta", 0.75f);
  const double bias = node.GetFloat("bias", 1.0f);
  const AxisSplit s = SplitAtAxis(xt->shape(), 1);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  const std::vector<double> x = ToDoubles(*xt);
  std::vector<double> y(x.size());
  for (int64_t n = 0; n < s.outer; ++n) {
    for (int64_t c = 0; c < s.len; ++c) {
      const int64_t c_lo = std::max<int64_t>(0, c - before);
      const int64_t c_hi = std::min(s.len - 1, c + std::min(after, s.len));
      for (int64_t i = 0; i < s.inner; ++i) {
        double sq = 0.0;
        for (int64_t k = c_lo; k <= c_hi; ++k) {
          const double v = x[(n * s.len + k) * s.inner + i];
          sq += v * v;
        }
        const int64_t at = (n * s.len + c) * s.inner + i;
        y[at] = x[at] / std::pow(bias + alpha / static_cast<double>(size) * sq, beta);
      }
    }
  }
  return std::vector<Tensor>{FromDoubles(xt->dtype(), xt->shape(), y)};
}

// MeanVarianceNormalization: (x - mean) / (std + 1e-9) over `axes` (default N, H, W), the
// formula of ONNX's function body.
absl::StatusOr<std::vector<Tensor>> MeanVarianceNorm(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* xt, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckFloat(node, *xt));
  std::vector<int64_t> group_shape = xt->shape();  // reduced axes become 1
  for (int64_t axis : node.GetInts("axes", {0, 2, 3})) {
    ASSIGN_OR_RETURN(int64_t a, NormalizeAxis(node, axis, xt->rank()));
    group_shape[a] = 1;
  }
  BroadcastIndexer group_of(group_shape, xt->shape());
  const int64_t groups = NumElements(group_shape);
  const int64_t per_group = groups == 0 ? 0 : xt->numel() / groups;
  std::vector<double> x = ToDoubles(*xt), mean(groups, 0.0), var(groups, 0.0);
  for (int64_t i = 0; i < xt->numel(); ++i) mean[group_of(i)] += x[i];
  for (double& m : mean) m /= static_cast<double>(per_group);
  for (int64_t i = 0; i < xt->numel(); ++i) {
    const double d = x[i] - mean[group_of(i)];
    var[group_of(i)] += d * d;
  }
  for (int64_t i = 0; i < xt->numel(); ++i) {
    const int64_t g = group_of(i);
    x[i] = (x[i] - mean[g]) / (std::sqrt(var[g] / static_cast<double>(per_group)) + 1e-9);
  }
  return std::vector<Tensor>{FromDoubles(xt->dtype(), xt->shape(), x)};
}

}  // namespace

void RegisterAxisNormKernels(KernelRegistry& r) {
  r.Register("", "LayerNormalization",
             [](const Node& n, const KernelInputs& in) { return AxisNorm(n, in, false); });
  r.Register("", "RMSNormalization",
             [](const Node& n, const KernelInputs& in) { return AxisNorm(n, in, true); });
  r.Register("", "LpNormalization", LpNorm);
  r.Register("", "LRN", Lrn);
  r.Register("", "MeanVarianceNormalization", MeanVarianceNorm);
}

}  // namespace kiln::ref::nn
