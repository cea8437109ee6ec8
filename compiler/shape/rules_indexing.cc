// Shape rules for indexing and generator operators: Gather, GatherElements, GatherND,
// ScatterElements, ScatterND, OneHot, Trilu, EyeLike, Range. Sizes that come from tensor
// values (OneHot's depth, Range's length) are static only when those inputs are constants,
// or, for Range, when its limit is its start plus a constant (below).
#include <string>

#include "compiler/shape/reduction_rules.h"
#include "compiler/shape/shape_util.h"
#include "ops/range.h"

namespace kiln::shape {
namespace {

absl::Status GatherRule(InferContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  std::optional<Shape> data = ctx.input_shape(0), indices = ctx.input_shape(1);
  if (!data || !indices) {
    ctx.set_output(0, dtype, std::nullopt);
    return absl::OkStatus();
  }
  if (data->empty()) return ctx.Invalid("data must have rank >= 1");
  const auto rank = static_cast<int64_t>(data->size());
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().GetInt("axis", 0), rank));
  Shape out(data->begin(), data->begin() + axis);
  out.insert(out.end(), indices->begin(), indices->end());
  out.insert(out.end(), data->begin() + axis + 1, data->end());
  ctx.set_output(0, dtype, out);
  return absl::OkStatus();
}

absl::Status GatherElementsRule(InferContext& ctx) {
  std::optional<Shape> data = ctx.input_shape(0), indices = ctx.input_shape(1);
  if (data && indices && data->size() != indices->size()) {
    return ctx.Invalid("indices rank differs from data rank");
  }
  ctx.set_output(0, ctx.input_dtype(0), indices);
  return absl::OkStatus();
}

absl::Status GatherNDRule(InferContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  std::optional<Shape> data = ctx.input_shape(0), indices = ctx.input_shape(1);
  if (!data || !indices || indices->empty() || !indices->back().known()) {
    ctx.set_output(0, dtype, std::nullopt);
    return absl::OkStatus();
  }
  const int64_t b = ctx.node().GetInt("batch_dims", 0);
  const int64_t m = indices->back().value;
  const auto r = static_cast<int64_t>(data->size());
  const auto q = static_cast<int64_t>(indices->size());
  if (b < 0 || b >= std::min(r, q) || m < 1 || m > r - b) {
    return ctx.Invalid("indices last dim " + std::to_string(m) + " and batch_dims " +
                       std::to_string(b) + " do not fit data of rank " + std::to_string(r));
  }
  Shape out(indices->begin(), indices->end() - 1);
  out.insert(out.end(), data->begin() + b + m, data->end());
  ctx.set_output(0, dtype, out);
  return absl::OkStatus();
}

absl::Status OneHotRule(InferContext& ctx) {
  const DType dtype = ctx.input_dtype(2);
  std::optional<Shape> indices = ctx.input_shape(0);
  if (!indices) {
    ctx.set_output(0, dtype, std::nullopt);
    return absl::OkStatus();
  }
  const auto rank = static_cast<int64_t>(indices->size()) + 1;
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().GetInt("axis", -1), rank));
  Dim depth;
  if (const Tensor* t = ctx.input_constant(1); t && t->numel() == 1) {
    const double d = t->GetDouble(0);
    if (!(d >= 1.0)) return ctx.Invalid("depth must be positive");
    if (d <= 2147483648.0) depth = Dim(static_cast<int64_t>(d));
  }
  Shape out = *indices;
  out.insert(out.begin() + axis, depth);
  ctx.set_output(0, dtype, out);
  return absl::OkStatus();
}

absl::Status EyeLikeRule(InferContext& ctx) {
  std::optional<Shape> in = ctx.input_shape(0);
  if (in && in->size() != 2) return ctx.Invalid("input must be 2-D");
  const int64_t dt = ctx.node().GetInt("dtype", static_cast<int64_t>(ctx.input_dtype(0)));
  if (!IsValidOnnxDType(static_cast<int32_t>(dt))) {
    return ctx.Invalid("invalid dtype " + std::to_string(dt));
  }
  ctx.set_output(0, static_cast<DType>(dt), in);
  return absl::OkStatus();
}

// The constant k when integer Range's limit is Add(start, k) or Add(k, start): the length is
// then k / delta rounded up whatever the start is. Exporters write positions so
// (torch.arange(past, past + seq)), and a start read at run time (a cache's length from a mask,
// server/model/cache_mask.h) keeps the positions' count static.
const Tensor* OffsetFromStart(const Node& range) {
  const Value* start = range.input(0);
  const Value* limit = range.input(1);
  if (!start || !limit || !limit->producer || !IsIntegerDType(start->dtype)) return nullptr;
  const Node& add = *limit->producer;
  if (add.op_type != "Add" || !add.domain.empty() || add.inputs.size() != 2) return nullptr;
  for (size_t i = 0; i < 2; ++i) {
    const Value* other = add.input(1 - i);
    if (add.input(i) == start && other && other->constant && other->constant->numel() == 1) {
      return &*other->constant;
    }
  }
  return nullptr;
}

absl::Status RangeRule(InferContext& ctx) {
  const Tensor* start = ctx.input_constant(0);
  const Tensor* limit = ctx.input_constant(1);
  const Tensor* delta = ctx.input_constant(2);
  Dim length;
  if (start && limit && delta) {
    // The kernel's own length computation, so rule and kernel agree exactly.
    ASSIGN_OR_RETURN(int64_t n, ref::RangeLength(ctx.node(), *start, *limit, *delta));
    length = Dim(n);
  } else if (const Tensor* k = OffsetFromStart(ctx.node()); k && delta && !limit) {
    // start 0, limit k: the same length as any start with limit start + k (integers).
    const Tensor zero = Tensor::Scalar(k->dtype(), 0.0);
    ASSIGN_OR_RETURN(int64_t n, ref::RangeLength(ctx.node(), zero, *k, *delta));
    length = Dim(n);
  }
  ctx.set_output(0, ctx.input_dtype(0), Shape{length});
  return absl::OkStatus();
}

}  // namespace

void RegisterIndexingRules(RuleRegistry& r) {
  r.Register(kOnnxDomain, "Gather", GatherRule);
  r.Register(kOnnxDomain, "GatherElements", GatherElementsRule);
  r.Register(kOnnxDomain, "GatherND", GatherNDRule);
  r.Register(kOnnxDomain, "ScatterElements", SameAsInputRule);
  r.Register(kOnnxDomain, "ScatterND", SameAsInputRule);
  r.Register(kOnnxDomain, "OneHot", OneHotRule);
  r.Register(kOnnxDomain, "Trilu", SameAsInputRule);
  r.Register(kOnnxDomain, "EyeLike", EyeLikeRule);
  r.Register(kOnnxDomain, "Range", RangeRule);
}

}  // namespace kiln::shape
