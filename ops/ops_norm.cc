// Channel normalizations: BatchNormalization, InstanceNormalization, GroupNormalization
// (the axis-wise ones are in ops_norm_axis.cc). Means and variances are
// two-pass (mean first, then squared deviations) in double; variances are population ones.
#include <cmath>

#include "ops/kernel_util.h"
#include "ops/nn_ops.h"

namespace kiln::ref::nn {
namespace {

struct Moments {
  double mean = 0.0, var = 0.0;
};

// Mean and population variance of `count` elements at v[start + i * stride], iterating
// `blocks` blocks of `count` contiguous-by-stride elements spaced `block_stride` apart.
Moments ComputeMoments(const double* v, int64_t blocks, int64_t block_stride, int64_t count) {
  Moments m;
  const double n = static_cast<double>(blocks * count);
  if (n == 0) return m;
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t i = 0; i < count; ++i) m.mean += v[b * block_stride + i];
  }
  m.mean /= n;
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t i = 0; i < count; ++i) {
      const double d = v[b * block_stride + i] - m.mean;
      m.var += d * d;
    }
  }
  m.var /= n;
  return m;
}

// A per-channel parameter vector: present, float, with exactly `c` elements.
absl::StatusOr<std::vector<double>> ChannelParam(const Node& node, const KernelInputs& in, size_t i,
                                                 int64_t c) {
  ASSIGN_OR_RETURN(std::vector<double> v, FloatInput(node, in, i));
  if (static_cast<int64_t>(v.size()) != c) {
    return InvalidInput(node, "input " + std::to_string(i) + " must have " + std::to_string(c) +
                                  " elements, has " + std::to_string(v.size()));
  }
  return v;
}

// Training-mode statistics: the batch moments per channel and the updated running ones.
struct BatchStats {
  std::vector<double> mean, var, running_mean, running_var;
};

BatchStats TrainingStats(const std::vector<double>& x, int64_t n_batch, int64_t c, int64_t spatial,
                         const std::vector<double>& mean, const std::vector<double>& var,
                         double momentum) {
  BatchStats s;
  for (int64_t ch = 0; ch < c; ++ch) {
    Moments m = ComputeMoments(x.data() + ch * spatial, n_batch, c * spatial, spatial);
    s.mean.push_back(m.mean);
    s.var.push_back(m.var);
    s.running_mean.push_back(mean[ch] * momentum + m.mean * (1.0 - momentum));
    s.running_var.push_back(var[ch] * momentum + m.var * (1.0 - momentum));
  }
  return s;
}

absl::StatusOr<std::vector<Tensor>> BatchNorm(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* xt, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckFloat(node, *xt));
  if (xt->rank() < 2) return InvalidInput(node, "X must have rank >= 2");
  const int64_t n_batch = xt->dim(0), c = xt->dim(1);
  const int64_t spatial = n_batch * c == 0 ? 0 : xt->numel() / (n_batch * c);
  ASSIGN_OR_RETURN(std::vector<double> scale, ChannelParam(node, in, 1, c));
  ASSIGN_OR_RETURN(std::vector<double> bias, ChannelParam(node, in, 2, c));
  ASSIGN_OR_RETURN(std::vector<double> mean, ChannelParam(node, in, 3, c));
  ASSIGN_OR_RETURN(std::vector<double> var, ChannelParam(node, in, 4, c));
  const double eps = node.GetFloat("epsilon", 1e-5f);
  const bool training = node.GetInt("training_mode", 0) != 0;
  std::vector<double> x = ToDoubles(*xt);
  BatchStats stats;
  if (training) {
    stats = TrainingStats(x, n_batch, c, spatial, mean, var, node.GetFloat("momentum", 0.9f));
    mean = stats.mean;
    var = stats.var;
  }
  for (int64_t n = 0; n < n_batch; ++n) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const double a = scale[ch] / std::sqrt(var[ch] + eps);
      double* p = x.data() + (n * c + ch) * spatial;
      for (int64_t i = 0; i < spatial; ++i) p[i] = (p[i] - mean[ch]) * a + bias[ch];
    }
  }
  std::vector<Tensor> outs{FromDoubles(xt->dtype(), xt->shape(), x)};
  if (training) {
    const DType stat_type = in[3]->dtype();
    outs.push_back(FromDoubles(stat_type, {c}, stats.running_mean));
    outs.push_back(FromDoubles(stat_type, {c}, stats.running_var));
  }
  return outs;
}

// Normalizes groups of channels of X (N, C, ...): `groups` consecutive channel blocks per
// sample, then applies per-channel scale and bias. Instance norm is groups == C.
absl::StatusOr<std::vector<Tensor>> NormalizeChannelGroups(const Node& node, const KernelInputs& in,
                                                           int64_t groups, bool per_group_affine) {
  const Tensor* xt = in[0];
  const int64_t n_batch = xt->dim(0), c = xt->dim(1);
  const int64_t spatial = n_batch * c == 0 ? 0 : xt->numel() / (n_batch * c);
  const int64_t n_affine = per_group_affine ? groups : c;
  ASSIGN_OR_RETURN(std::vector<double> scale, ChannelParam(node, in, 1, n_affine));
  ASSIGN_OR_RETURN(std::vector<double> bias, ChannelParam(node, in, 2, n_affine));
  const double eps = node.GetFloat("epsilon", 1e-5f);
  std::vector<double> x = ToDoubles(*xt);
  const int64_t cg = c / groups, block = cg * spatial;
  for (int64_t n = 0; n < n_batch; ++n) {
    for (int64_t g = 0; g < groups; ++g) {
      double* p = x.data() + (n * groups + g) * block;
      const Moments m = ComputeMoments(p, 1, 0, block);
      const double inv = 1.0 / std::sqrt(m.var + eps);
      for (int64_t ch = 0; ch < cg; ++ch) {
        const int64_t a = per_group_affine ? g : g * cg + ch;
        double* q = p + ch * spatial;
        for (int64_t i = 0; i < spatial; ++i) q[i] = (q[i] - m.mean) * inv * scale[a] + bias[a];
      }
    }
  }
  return std::vector<Tensor>{FromDoubles(xt->dtype(), xt->shape(), x)};
}

absl::StatusOr<std::vector<Tensor>> InstanceNorm(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckFloat(node, *x));
  if (x->rank() < 2) return InvalidInput(node, "X must have rank >= 2");
  if (x->dim(1) == 0) return std::vector<Tensor>{x->Clone()};
  return NormalizeChannelGroups(node, in, x->dim(1), false);
}

// GroupNormalization, opset 21 form (per-channel scale/bias). The opset 18 form (per-group
// scale/bias) is accepted too: it is recognised by the parameter size.
absl::StatusOr<std::vector<Tensor>> GroupNorm(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckFloat(node, *x));
  ASSIGN_OR_RETURN(const Tensor* scale, RequireInput(node, in, 1));
  if (x->rank() < 2) return InvalidInput(node, "X must have rank >= 2");
  const int64_t groups = node.GetInt("num_groups", -1), c = x->dim(1);
  if (groups < 1 || c % groups != 0) {
    return InvalidInput(node, "num_groups " + std::to_string(groups) +
                                  " must be positive and divide the " + std::to_string(c) +
                                  " channels");
  }
  const bool per_group = scale->numel() != c && scale->numel() == groups;
  return NormalizeChannelGroups(node, in, groups, per_group);
}

}  // namespace

void RegisterNormKernels(KernelRegistry& r) {
  RegisterAxisNormKernels(r);
  r.Register("", "BatchNormalization", BatchNorm);
  r.Register("", "InstanceNormalization", InstanceNorm);
  r.Register("", "GroupNormalization", GroupNorm);
}

}  // namespace kiln::ref::nn
