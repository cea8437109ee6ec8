// Det: the determinant of each trailing (M, M) matrix, by Gaussian elimination with partial
// pivoting in double (a zero pivot column gives 0; NaN/inf propagate through the products).
#include <cmath>

#include "ops/kernel_util.h"
#include "ops/nn_ops.h"

namespace kiln::ref::nn {
namespace {

double Determinant(std::vector<double> a, int64_t m) {
  double det = 1.0;
  for (int64_t k = 0; k < m; ++k) {
    int64_t p = k;
    for (int64_t i = k + 1; i < m; ++i) {
      if (std::fabs(a[i * m + k]) > std::fabs(a[p * m + k])) p = i;
    }
    if (a[p * m + k] == 0.0) return 0.0;
    if (p != k) {
      for (int64_t j = 0; j < m; ++j) std::swap(a[k * m + j], a[p * m + j]);
      det = -det;
    }
    det *= a[k * m + k];
    for (int64_t i = k + 1; i < m; ++i) {
      const double f = a[i * m + k] / a[k * m + k];
      for (int64_t j = k; j < m; ++j) a[i * m + j] -= f * a[k * m + j];
    }
  }
  return det;
}

absl::StatusOr<std::vector<Tensor>> Det(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckFloat(node, *x));
  if (x->rank() < 2 || x->dim(x->rank() - 1) != x->dim(x->rank() - 2)) {
    return InvalidInput(node, "input must be (..., M, M), got " + ShapeToString(x->shape()));
  }
  const int64_t m = x->dim(x->rank() - 1), mm = m * m;
  const std::vector<double> v = ToDoubles(*x);
  std::vector<int64_t> out_shape(x->shape().begin(), x->shape().end() - 2);
  std::vector<double> dets(NumElements(out_shape));
  for (size_t b = 0; b < dets.size(); ++b) {
    dets[b] = Determinant(std::vector<double>(v.begin() + b * mm, v.begin() + (b + 1) * mm), m);
  }
  return std::vector<Tensor>{FromDoubles(x->dtype(), out_shape, dets)};
}

}  // namespace

void RegisterLinalgKernels(KernelRegistry& r) { r.Register("", "Det", Det); }

}  // namespace kiln::ref::nn
