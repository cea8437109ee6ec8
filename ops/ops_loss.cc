// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opsets 12, 13, 22). Both reduce
// -logp[n, target[n, d], d] over a (N, C, d1..dk) input: an element whose target equals
// ignore_index contributes nothing and has weight 0; "mean" divides the weighted sum by the
// sum of the weights actually used (the element count when there are no weights), so a batch
// where every element is ignored gives 0/0 = NaN, as ONNX's NumPy definition does.
#include <cmath>
#include <optional>
#include <string>

#include "ops/kernel_util.h"
#include "ops/nn_ops.h"

namespace kiln::ref::nn {
namespace {

enum class Reduction { kNone, kSum, kMean };

absl::StatusOr<Reduction> ParseReduction(const Node& node) {
  const std::string r = node.GetString("reduction", "mean");
  if (r == "none") return Reduction::kNone;
  if (r == "sum") return Reduction::kSum;
  if (r == "mean") return Reduction::kMean;
  return InvalidInput(node, "reduction must be none, sum or mean, got '" + r + "'");
}

// The operands of the shared loss: input (N, C, D...) as doubles with its geometry, target.
struct LossOperands {
  std::vector<double> logp;  // (N, C, D) flattened
  int64_t n = 0, c = 0, d = 1;
  std::vector<int64_t> target;
  std::vector<int64_t> target_shape;
  std::optional<std::vector<double>> weight;
};

absl::Status CheckTargetShape(const Node& node, const Tensor& x, const Tensor& t) {
  bool ok = x.rank() >= 2 && t.rank() == x.rank() - 1 && t.dim(0) == x.dim(0);
  for (int64_t i = 2; ok && i < x.rank(); ++i) ok = t.dim(i - 1) == x.dim(i);
  if (!ok) {
    return InvalidInput(node, "target " + ShapeToString(t.shape()) + " does not fit input " +
                                  ShapeToString(x.shape()) +
                                  " (want (N, d1..dk) of (N, C, d1..dk))");
  }
  return absl::OkStatus();
}

absl::StatusOr<LossOperands> ReadOperands(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* t, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckFloat(node, *x));
  if (t->dtype() != DType::kInt32 && t->dtype() != DType::kInt64) {
    return InvalidInput(node, "target must be int32 or int64, got " + DTypeName(t->dtype()));
  }
  RETURN_IF_ERROR(CheckTargetShape(node, *x, *t));
  LossOperands op;
  op.n = x->dim(0);
  op.c = x->dim(1);
  for (int64_t i = 2; i < x->rank(); ++i) op.d *= x->dim(i);
  op.logp = ToDoubles(*x);
  op.target = t->ToInt64Vector();
  op.target_shape = t->shape();
  if (in.size() > 2 && in[2]) {
    if (in[2]->dtype() != x->dtype() || in[2]->rank() != 1 || in[2]->dim(0) != op.c) {
      return InvalidInput(node, "weight must be a 1-D tensor of C = " + std::to_string(op.c) +
                                    " elements of the input's dtype");
    }
    op.weight = ToDoubles(*in[2]);
  }
  return op;
}

// The loss of every element and its reduction, in the input's dtype.
absl::StatusOr<Tensor> ComputeLoss(const Node& node, const LossOperands& op, DType dtype) {
  ASSIGN_OR_RETURN(Reduction red, ParseReduction(node));
  const bool has_ignore = node.HasAttr("ignore_index");
  const int64_t ignore = node.GetInt("ignore_index", 0);
  std::vector<double> loss(op.target.size(), 0.0);
  double sum = 0.0, weight_sum = 0.0;
  for (int64_t i = 0; i < op.n; ++i) {
    for (int64_t k = 0; k < op.d; ++k) {
      const int64_t j = i * op.d + k;
      const int64_t cls = op.target[j];
      if (has_ignore && cls == ignore) continue;
      if (cls < 0 || cls >= op.c) {
        return InvalidInput(node, "target " + std::to_string(cls) + " is outside [0, " +
                                      std::to_string(op.c) + ")");
      }
      const double w = op.weight ? (*op.weight)[cls] : 1.0;
      loss[j] = -op.logp[(i * op.c + cls) * op.d + k] * w;
      sum += loss[j];
      weight_sum += w;
    }
  }
  if (red == Reduction::kNone) return FromDoubles(dtype, op.target_shape, loss);
  return FromDoubles(dtype, {}, {red == Reduction::kSum ? sum : sum / weight_sum});
}

absl::StatusOr<std::vector<Tensor>> NllLoss(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(LossOperands op, ReadOperands(node, in));
  ASSIGN_OR_RETURN(Tensor loss, ComputeLoss(node, op, in[0]->dtype()));
  return std::vector<Tensor>{std::move(loss)};
}

// log_softmax over axis 1 of the (N, C, D) buffer, in place.
void LogSoftmaxOverClasses(LossOperands& op) {
  for (int64_t i = 0; i < op.n; ++i) {
    for (int64_t k = 0; k < op.d; ++k) {
      double* p = op.logp.data() + i * op.c * op.d + k;
      double mx = -INFINITY;
      for (int64_t j = 0; j < op.c; ++j) mx = std::fmax(mx, p[j * op.d]);
      double s = 0.0;
      for (int64_t j = 0; j < op.c; ++j) s += std::exp(p[j * op.d] - mx);
      const double log_s = std::log(s);
      for (int64_t j = 0; j < op.c; ++j) p[j * op.d] = p[j * op.d] - mx - log_s;
    }
  }
}

absl::StatusOr<std::vector<Tensor>> SoftmaxCrossEntropy(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(LossOperands op, ReadOperands(node, in));
  LogSoftmaxOverClasses(op);
  const DType dtype = in[0]->dtype();
  ASSIGN_OR_RETURN(Tensor loss, ComputeLoss(node, op, dtype));
  std::vector<Tensor> outs{std::move(loss)};
  if (node.outputs.size() > 1 && node.outputs[1]) {
    outs.push_back(FromDoubles(dtype, in[0]->shape(), op.logp));
  }
  return outs;
}

}  // namespace

void RegisterLossKernels(KernelRegistry& r) {
  r.Register("", "NegativeLogLikelihoodLoss", NllLoss);
  r.Register("", "SoftmaxCrossEntropyLoss", SoftmaxCrossEntropy);
}

}  // namespace kiln::ref::nn
