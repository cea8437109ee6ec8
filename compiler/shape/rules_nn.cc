// Shape rules of the NN family: Conv, ConvTranspose, pools, normalizations, softmaxes and
// Dropout (Gemm/MatMul/Einsum are in rules_nn_linalg.cc). Output spatial sizes come from the
// same window code the reference kernels use (ops/nn_window.h), so inference
// and execution always agree; they need known input spatial dims and are left unknown
// otherwise, while batch and channel dims (often symbolic) pass through.
#include "compiler/shape/nn_rules.h"
#include "compiler/shape/shape_util.h"
#include "ops/nn_window.h"

namespace kiln::shape {
namespace {

// The known values of dims [2, rank), or nullopt if any is unknown.
std::optional<std::vector<int64_t>> KnownSpatial(const Shape& s) {
  std::vector<int64_t> v;
  for (size_t i = 2; i < s.size(); ++i) {
    if (!s[i].known()) return std::nullopt;
    v.push_back(s[i].value);
  }
  return v;
}

// X's shape with rank >= min_rank, or nullopt (unknown rank) after setting output 0 untyped.
absl::StatusOr<std::optional<Shape>> InputWithRank(InferContext& ctx, size_t min_rank) {
  std::optional<Shape> x = ctx.input_shape(0);
  if (!x) {
    ctx.set_output(0, ctx.input_dtype(0), std::nullopt);
    return x;
  }
  if (x->size() < min_rank) {
    return ctx.Invalid("input rank " + std::to_string(x->size()) + " is below " +
                       std::to_string(min_rank));
  }
  return x;
}

}  // namespace

// Conv (transpose = false) and ConvTranspose: the output shape from X (input xi) and W (input
// wi); nullopt when X's rank is unknown.
absl::StatusOr<std::optional<Shape>> ConvOutputShape(const InferContext& ctx, size_t xi,
                                                     size_t wi, bool transpose) {
  std::optional<Shape> x = ctx.input_shape(xi);
  if (!x) return x;
  if (x->size() < 3) return ctx.Invalid("input rank " + std::to_string(x->size()) + " is below 3");
  const Node& node = ctx.node();
  const int64_t group = node.GetInt("group", 1);
  if (group < 1 || group > (1 << 24)) return ctx.Invalid("group is out of range");
  std::optional<Shape> w = ctx.input_shape(wi);
  if (w && w->size() != x->size()) return ctx.Invalid("X and W ranks differ");
  Shape out = UnknownDims(static_cast<int64_t>(x->size()));
  out[0] = (*x)[0];
  if (w && !transpose) out[1] = (*w)[0];
  if (w && transpose && (*w)[1].known()) out[1] = Dim((*w)[1].value * group);
  // The input channels W implies: W[0] for ConvTranspose, W[1] * group for Conv.
  Dim wc;
  if (w && transpose) wc = (*w)[0];
  if (w && !transpose && (*w)[1].known()) wc = Dim((*w)[1].value * group);
  if (wc.known() && (*x)[1].known() && wc.value != (*x)[1].value) {
    return ctx.Invalid("W " + ShapeToString(*w) + " and group " + std::to_string(group) +
                       " do not fit X " + ShapeToString(*x));
  }
  std::optional<std::vector<int64_t>> xs = KnownSpatial(*x);
  std::optional<std::vector<int64_t>> ws = w ? KnownSpatial(*w) : std::nullopt;
  if (xs && (ws || node.HasAttr("kernel_shape"))) {
    ASSIGN_OR_RETURN(std::vector<int64_t> k,
                     ref::nn::KernelShape(node, xs->size(), ws ? &*ws : nullptr));
    ASSIGN_OR_RETURN(ref::nn::Window win, transpose ? ref::nn::ConvTransposeWindow(node, *xs, k)
                                                    : ref::nn::ConvWindow(node, *xs, k));
    for (size_t i = 0; i < win.out.size(); ++i) out[i + 2] = Dim(win.out[i]);
  }
  return std::optional<Shape>(out);
}

namespace {

absl::Status ConvRule(InferContext& ctx, bool transpose) {
  ASSIGN_OR_RETURN(std::optional<Shape> out, ConvOutputShape(ctx, 0, 1, transpose));
  ctx.set_output(0, ctx.input_dtype(0), out);
  return absl::OkStatus();
}

absl::Status PoolRule(InferContext& ctx) {
  ASSIGN_OR_RETURN(std::optional<Shape> x, InputWithRank(ctx, 3));
  if (!x) {
    ctx.set_output(1, DType::kInt64, std::nullopt);
    return absl::OkStatus();
  }
  Shape out = UnknownDims(static_cast<int64_t>(x->size()));
  out[0] = (*x)[0];
  out[1] = (*x)[1];
  const Node& node = ctx.node();
  if (std::optional<std::vector<int64_t>> xs = KnownSpatial(*x)) {
    ASSIGN_OR_RETURN(std::vector<int64_t> k, ref::nn::KernelShape(node, xs->size(), nullptr));
    ASSIGN_OR_RETURN(ref::nn::Window win, ref::nn::ConvWindow(node, *xs, k));
    for (size_t i = 0; i < win.out.size(); ++i) out[i + 2] = Dim(win.out[i]);
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
  ctx.set_output(1, DType::kInt64, out);  // MaxPool's Indices
  return absl::OkStatus();
}

absl::Status GlobalPoolRule(InferContext& ctx) {
  ASSIGN_OR_RETURN(std::optional<Shape> x, InputWithRank(ctx, 2));
  if (!x) return absl::OkStatus();
  Shape out(x->size(), Dim(1));
  out[0] = (*x)[0];
  out[1] = (*x)[1];
  ctx.set_output(0, ctx.input_dtype(0), out);
  return absl::OkStatus();
}

absl::Status BatchNormRule(InferContext& ctx) {
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  // Training mode's running mean and variance: one value per channel, typed like the mean.
  std::optional<Shape> x = ctx.input_shape(0);
  std::optional<Shape> c = x && x->size() >= 2 ? std::optional<Shape>(Shape{(*x)[1]})
                                               : ctx.input_shape(3);
  ctx.set_output(1, ctx.input_dtype(3), c);
  ctx.set_output(2, ctx.input_dtype(3), c);
  return absl::OkStatus();
}

absl::Status LayerNormRule(InferContext& ctx) {
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  const int64_t stash = ctx.node().GetInt("stash_type", 1);
  if (stash < 0 || stash > 1000 || !IsValidOnnxDType(static_cast<int32_t>(stash)) ||
      !IsFloatDType(static_cast<DType>(stash))) {
    return ctx.Invalid("stash_type " + std::to_string(stash) + " is not a float type");
  }
  std::optional<Shape> stats = ctx.input_shape(0);
  if (stats) {
    ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().GetInt("axis", -1),
                                                 static_cast<int64_t>(stats->size())));
    for (size_t i = static_cast<size_t>(axis); i < stats->size(); ++i) (*stats)[i] = Dim(1);
  }
  ctx.set_output(1, static_cast<DType>(stash), stats);
  ctx.set_output(2, static_cast<DType>(stash), stats);
  return absl::OkStatus();
}

absl::Status DropoutRule(InferContext& ctx) {
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  ctx.set_output(1, DType::kBool, ctx.input_shape(0));
  return absl::OkStatus();
}

}  // namespace

void RegisterNnRules(RuleRegistry& r) {
  r.Register("", "Conv", [](InferContext& c) { return ConvRule(c, false); });
  r.Register("", "ConvTranspose", [](InferContext& c) { return ConvRule(c, true); });
  for (const char* op : {"MaxPool", "AveragePool", "LpPool"}) r.Register("", op, PoolRule);
  for (const char* op : {"GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"}) {
    r.Register("", op, GlobalPoolRule);
  }
  for (const char* op : {"InstanceNormalization", "GroupNormalization", "RMSNormalization",
                         "LpNormalization", "MeanVarianceNormalization", "LRN", "Softmax",
                         "LogSoftmax", "Hardmax"}) {
    r.Register("", op, SameAsInputRule);
  }
  r.Register("", "BatchNormalization", BatchNormRule);
  r.Register("", "LayerNormalization", LayerNormRule);
  r.Register("", "Dropout", DropoutRule);
  RegisterNnLinalgRules(r);
  RegisterLossRules(r);
  RegisterAttentionRules(r);
  RegisterQuantizeRules(r);
  RegisterGridRules(r);
  RegisterDetectionRules(r);
  RegisterRecurrentRules(r);
  RegisterSignalRules(r);
}

}  // namespace kiln::shape
