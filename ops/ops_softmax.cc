// Softmax, LogSoftmax and Hardmax along one axis (the opset 13 form; older models are
// rewritten to Flatten + op + Reshape by the importer's normalizer).
#include <cmath>
#include <limits>

#include "ops/kernel_util.h"
#include "ops/nn_ops.h"

namespace kiln::ref::nn {
namespace {

enum class MaxKind { kSoftmax, kLogSoftmax, kHardmax };

// Transforms one strided slice of `len` elements in place.
void ApplyOne(double* v, int64_t len, int64_t stride, MaxKind kind) {
  double mx = -std::numeric_limits<double>::infinity();
  int64_t arg = 0;
  for (int64_t i = 0; i < len; ++i) {
    // Hardmax picks the first maximum; NaN compares false and is never picked.
    if (v[i * stride] > mx) {
      mx = v[i * stride];
      arg = i;
    }
  }
  if (kind == MaxKind::kHardmax) {
    for (int64_t i = 0; i < len; ++i) v[i * stride] = i == arg ? 1.0 : 0.0;
    return;
  }
  // Subtracting the max keeps exp() finite. An all -inf slice keeps mx finite-safe below
  // (it comes out NaN either way, as numpy's x - max gives). A +inf in the slice is left
  // as the max: inf - inf is NaN and the whole slice is NaN, as in ONNX's NumPy definition.
  if (mx == -std::numeric_limits<double>::infinity()) mx = 0.0;
  double sum = 0.0;
  for (int64_t i = 0; i < len; ++i) sum += std::exp(v[i * stride] - mx);
  const double log_sum = std::log(sum);
  for (int64_t i = 0; i < len; ++i) {
    double& x = v[i * stride];
    x = kind == MaxKind::kSoftmax ? std::exp(x - mx) / sum : x - mx - log_sum;
  }
}

absl::StatusOr<std::vector<Tensor>> AlongAxis(const Node& node, const KernelInputs& in,
                                              MaxKind kind) {
  ASSIGN_OR_RETURN(const Tensor* xt, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckFloat(node, *xt));
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, node.GetInt("axis", -1), xt->rank()));
  const AxisSplit s = SplitAtAxis(xt->shape(), axis);
  std::vector<double> x = ToDoubles(*xt);
  if (xt->rank() == 0) {
    ApplyOne(x.data(), 1, 1, kind);
  } else {
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t i = 0; i < s.inner; ++i) {
        ApplyOne(x.data() + o * s.len * s.inner + i, s.len, s.inner, kind);
      }
    }
  }
  return std::vector<Tensor>{FromDoubles(xt->dtype(), xt->shape(), x)};
}

}  // namespace

void RegisterSoftmaxKernels(KernelRegistry& r) {
  auto reg = [&r](const char* op, MaxKind kind) {
    r.Register("", op,
               [kind](const Node& n, const KernelInputs& in) { return AlongAxis(n, in, kind); });
  };
  reg("Softmax", MaxKind::kSoftmax);
  reg("LogSoftmax", MaxKind::kLogSoftmax);
  reg("Hardmax", MaxKind::kHardmax);
}

}  // namespace kiln::ref::nn
