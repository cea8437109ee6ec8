// Shape rules for NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: the loss has the
// target's shape (N, d1..dk) with reduction "none" and is a scalar otherwise; SCE's optional
// second output (log_prob) has the scores' shape.
#include "compiler/shape/nn_rules.h"
#include "compiler/shape/shape_util.h"

namespace kiln::shape {
namespace {

absl::Status CheckLossShapes(const InferContext& ctx, const std::optional<Shape>& x,
                             const std::optional<Shape>& t) {
  if (x && x->size() < 2) return ctx.Invalid("input must have rank >= 2 (N, C, ...)");
  if (!x || !t) return absl::OkStatus();
  if (t->size() + 1 != x->size()) {
    return ctx.Invalid("target " + ShapeToString(*t) + " does not fit input " + ShapeToString(*x));
  }
  for (size_t i = 0; i < t->size(); ++i) {
    const Dim& a = (*t)[i];
    const Dim& b = (*x)[i == 0 ? 0 : i + 1];
    if (a.known() && b.known() && a.value != b.value) {
      return ctx.Invalid("target " + ShapeToString(*t) + " does not fit input " +
                         ShapeToString(*x));
    }
  }
  return absl::OkStatus();
}

absl::Status LossRule(InferContext& ctx) {
  const std::optional<Shape> x = ctx.input_shape(0), t = ctx.input_shape(1);
  RETURN_IF_ERROR(CheckLossShapes(ctx, x, t));
  const std::string red = ctx.node().GetString("reduction", "mean");
  if (red != "none" && red != "sum" && red != "mean") {
    return ctx.Invalid("reduction must be none, sum or mean, got '" + red + "'");
  }
  const DType t_dtype = ctx.input_dtype(1);
  if (t_dtype != DType::kUndefined && t_dtype != DType::kInt32 && t_dtype != DType::kInt64) {
    return ctx.Invalid("target must be int32 or int64, got " + DTypeName(t_dtype));
  }
  ctx.set_output(0, ctx.input_dtype(0), red == "none" ? t : std::optional<Shape>(Shape{}));
  ctx.set_output(1, ctx.input_dtype(0), x);  // SoftmaxCrossEntropyLoss's log_prob
  return absl::OkStatus();
}

}  // namespace

void RegisterLossRules(RuleRegistry& r) {
  r.Register("", "NegativeLogLikelihoodLoss", LossRule);
  r.Register("", "SoftmaxCrossEntropyLoss", LossRule);
}

}  // namespace kiln::shape
