// Shape rules for Compress, NonZero and Unique (sizes that depend on the values are unknown
// dims unless the deciding input is a constant), ReverseSequence and TensorScatter (their
// input's shape), CenterCropPad (the target sizes when constant), Det (the batch dims),
// MaxUnpool (output_shape, else the natural unpooled size) and Col2Im (N, C, image_shape).
#include "compiler/shape/shape_util.h"
#include "compiler/shape/tensor_rules.h"
#include "ops/nn_window.h"

namespace kiln::shape {
namespace {

absl::Status CompressRule(InferContext& ctx) {
  std::optional<Shape> x = ctx.input_shape_or_unknown_output(0);
  if (!x) return absl::OkStatus();
  Dim kept;
  if (const Tensor* c = ctx.input_constant(1)) {
    int64_t n = 0;
    for (int64_t i = 0; i < c->numel(); ++i) n += c->GetInt(i) != 0;
    kept = Dim(n);
  }
  if (!ctx.node().HasAttr("axis")) {
    ctx.set_output(0, ctx.input_dtype(0), Shape{kept});
    return absl::OkStatus();
  }
  if (x->empty()) return ctx.Invalid("axis given for a scalar");
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().GetInt("axis", 0),
                                               static_cast<int64_t>(x->size())));
  (*x)[axis] = kept;
  ctx.set_output(0, ctx.input_dtype(0), x);
  return absl::OkStatus();
}

absl::Status NonZeroRule(InferContext& ctx) {
  std::optional<Shape> x = ctx.input_shape(0);
  ctx.set_output(
      0, DType::kInt64,
      x ? std::optional<Shape>(Shape{Dim(std::max<int64_t>(1, x->size())), Dim()}) : std::nullopt);
  return absl::OkStatus();
}

absl::Status UniqueRule(InferContext& ctx) {
  std::optional<Shape> x = ctx.input_shape_or_unknown_output(0);
  for (size_t i = 1; i < 4; ++i) ctx.set_output(i, DType::kInt64, Shape{Dim()});
  if (!x) return absl::OkStatus();
  Dim len = DimProduct(*x);
  Shape y{Dim()};
  if (ctx.node().HasAttr("axis")) {
    if (x->empty()) return ctx.Invalid("axis given for a scalar");
    ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().GetInt("axis", 0),
                                                 static_cast<int64_t>(x->size())));
    len = (*x)[axis];
    y = *x;
    y[axis] = Dim();
  }
  ctx.set_output(0, ctx.input_dtype(0), y);
  ctx.set_output(2, DType::kInt64, Shape{len});
  return absl::OkStatus();
}

absl::Status CenterCropPadRule(InferContext& ctx) {
  std::optional<Shape> x = ctx.input_shape_or_unknown_output(0);
  if (!x) return absl::OkStatus();
  const int64_t rank = static_cast<int64_t>(x->size());
  std::vector<int64_t> axes = ctx.node().GetInts("axes");
  if (axes.empty()) {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  std::optional<std::vector<int64_t>> target = ConstantInts(ctx, 1);
  if (target && target->size() != axes.size()) return ctx.Invalid("shape must match the axes");
  for (size_t i = 0; i < axes.size(); ++i) {
    ASSIGN_OR_RETURN(int64_t a, NormalizeAxis(ctx, axes[i], rank));
    (*x)[a] = target ? Dim((*target)[i]) : Dim();
  }
  ctx.set_output(0, ctx.input_dtype(0), x);
  return absl::OkStatus();
}

absl::Status DetRule(InferContext& ctx) {
  std::optional<Shape> x = ctx.input_shape_or_unknown_output(0);
  if (!x) return absl::OkStatus();
  if (x->size() < 2) return ctx.Invalid("Det needs a (..., M, M) input");
  const Dim &a = (*x)[x->size() - 2], &b = x->back();
  if (a.known() && b.known() && a.value != b.value) return ctx.Invalid("matrices must be square");
  ctx.set_output(0, ctx.input_dtype(0), Shape(x->begin(), x->end() - 2));
  return absl::OkStatus();
}

absl::Status MaxUnpoolRule(InferContext& ctx) {
  std::optional<Shape> x = ctx.input_shape_or_unknown_output(0);
  if (!x) return absl::OkStatus();
  if (x->size() < 3) return ctx.Invalid("X must be (N, C, ...)");
  Shape out = UnknownDims(static_cast<int64_t>(x->size()));
  if (ctx.has_input(2)) {
    if (std::optional<std::vector<int64_t>> s = ConstantInts(ctx, 2)) out = ToShape(*s);
  } else {
    out[0] = (*x)[0];
    out[1] = (*x)[1];
    std::vector<int64_t> in;
    for (size_t d = 2; d < x->size(); ++d) in.push_back((*x)[d].value);
    if (std::all_of(in.begin(), in.end(), [](int64_t v) { return v >= 0; })) {
      ASSIGN_OR_RETURN(std::vector<int64_t> sp, ref::nn::MaxUnpoolSpatial(ctx.node(), in));
      for (size_t d = 0; d < sp.size(); ++d) out[d + 2] = Dim(sp[d]);
    }
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
  return absl::OkStatus();
}

absl::Status Col2ImRule(InferContext& ctx) {
  std::optional<Shape> x = ctx.input_shape_or_unknown_output(0);
  if (!x) return absl::OkStatus();
  if (x->size() != 3) return ctx.Invalid("input must be (N, C * prod(block), L)");
  std::optional<std::vector<int64_t>> image = ConstantInts(ctx, 1);
  std::optional<std::vector<int64_t>> block = ConstantInts(ctx, 2);
  std::optional<Shape> image_shape = ctx.input_shape(1);
  if (!image && !(image_shape && image_shape->size() == 1 && (*image_shape)[0].known())) {
    ctx.set_output(0, ctx.input_dtype(0), std::nullopt);
    return absl::OkStatus();
  }
  const int64_t r = image ? static_cast<int64_t>(image->size()) : (*image_shape)[0].value;
  Shape out = UnknownDims(r + 2);
  out[0] = (*x)[0];
  if (block && (*x)[1].known()) {
    const int64_t k = NumElements(*block);
    if (k <= 0 || (*x)[1].value % k != 0) return ctx.Invalid("channels do not fit block_shape");
    out[1] = Dim((*x)[1].value / k);
  }
  for (int64_t d = 0; image && d < r; ++d) out[d + 2] = Dim((*image)[d]);
  ctx.set_output(0, ctx.input_dtype(0), out);
  return absl::OkStatus();
}

}  // namespace

void RegisterSelectRules(RuleRegistry& r) {
  r.Register(kOnnxDomain, "Compress", CompressRule);
  r.Register(kOnnxDomain, "NonZero", NonZeroRule);
  r.Register(kOnnxDomain, "Unique", UniqueRule);
  r.Register(kOnnxDomain, "ReverseSequence", SameAsInputRule);
  r.Register(kOnnxDomain, "TensorScatter", SameAsInputRule);
  r.Register(kOnnxDomain, "CenterCropPad", CenterCropPadRule);
  r.Register(kOnnxDomain, "Det", DetRule);
  r.Register(kOnnxDomain, "MaxUnpool", MaxUnpoolRule);
  r.Register(kOnnxDomain, "Col2Im", Col2ImRule);
}

}  // namespace kiln::shape
