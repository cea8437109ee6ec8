// Shape rules for reductions and search: Reduce*, ArgMax/ArgMin, CumSum, CumProd, TopK. The
// indexing and generator operators (Gather*, Scatter*, OneHot, Trilu, EyeLike, Range) are in
// rules_indexing.cc; RegisterReductionRules registers both.
#include <string>

#include "compiler/shape/reduction_rules.h"
#include "compiler/shape/shape_util.h"

namespace kiln::shape {
namespace {

Shape KeepOrDrop(const Shape& in, const std::vector<bool>& reduced, bool keepdims) {
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!reduced[d]) {
      out.push_back(in[d]);
    } else if (keepdims) {
      out.push_back(Dim(1));
    }
  }
  return out;
}

// Output shape when the axes are only known at run time: keepdims keeps the rank; otherwise
// the rank is known only if the axes input's length is.
std::optional<Shape> DynamicAxesShape(const InferContext& ctx, int64_t rank, bool keepdims,
                                      bool noop) {
  if (keepdims) return UnknownDims(rank);
  std::optional<Shape> axes_shape = ctx.input_shape(1);
  if (!axes_shape || axes_shape->size() != 1 || !(*axes_shape)[0].known()) return std::nullopt;
  const int64_t n = (*axes_shape)[0].value;
  if (n == 0) return noop ? *ctx.input_shape(0) : Shape{};
  return n <= rank ? std::optional<Shape>(UnknownDims(rank - n)) : std::nullopt;
}

absl::Status ReduceRule(InferContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  std::optional<Shape> in = ctx.input_shape(0);
  const bool keepdims = ctx.node().GetInt("keepdims", 1) != 0;
  const bool noop = ctx.node().GetInt("noop_with_empty_axes", 0) != 0;
  if (!in) {
    ctx.set_output(0, dtype, std::nullopt);
    return absl::OkStatus();
  }
  const auto rank = static_cast<int64_t>(in->size());
  std::optional<std::vector<int64_t>> axes =
      ctx.has_input(1) ? ConstantInts(ctx, 1) : std::vector<int64_t>{};
  if (!axes) {
    ctx.set_output(0, dtype, DynamicAxesShape(ctx, rank, keepdims, noop));
    return absl::OkStatus();
  }
  // Empty axes: reduce everything, or nothing with noop_with_empty_axes (as the kernel does).
  std::vector<bool> reduced(static_cast<size_t>(rank), axes->empty() && !noop);
  for (int64_t a : *axes) {
    ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, a, rank));
    if (axis >= rank) continue;  // rank 0
    if (reduced[axis]) return ctx.Invalid("axis " + std::to_string(a) + " repeated");
    reduced[axis] = true;
  }
  ctx.set_output(0, dtype, KeepOrDrop(*in, reduced, keepdims));
  return absl::OkStatus();
}

absl::Status ArgRule(InferContext& ctx) {
  std::optional<Shape> in = ctx.input_shape(0);
  if (!in) {
    ctx.set_output(0, DType::kInt64, std::nullopt);
    return absl::OkStatus();
  }
  const auto rank = static_cast<int64_t>(in->size());
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().GetInt("axis", 0), rank));
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  if (axis < rank) reduced[axis] = true;
  const bool keepdims = ctx.node().GetInt("keepdims", 1) != 0;
  ctx.set_output(0, DType::kInt64, KeepOrDrop(*in, reduced, keepdims));
  return absl::OkStatus();
}

absl::Status TopKRule(InferContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  std::optional<Shape> in = ctx.input_shape(0);
  if (!in) {
    ctx.set_output(0, dtype, std::nullopt);
    ctx.set_output(1, DType::kInt64, std::nullopt);
    return absl::OkStatus();
  }
  if (in->empty()) return ctx.Invalid("input must have rank >= 1");
  const auto rank = static_cast<int64_t>(in->size());
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().GetInt("axis", -1), rank));
  Shape out = *in;
  out[axis] = Dim();
  std::optional<std::vector<int64_t>> k = ConstantInts(ctx, 1);
  if (k) {
    if (k->size() != 1) return ctx.Invalid("K must hold one value");
    const int64_t kv = (*k)[0];
    if (kv < 0 || ((*in)[axis].known() && kv > (*in)[axis].value)) {
      return ctx.Invalid("K=" + std::to_string(kv) + " out of range for axis " +
                         std::to_string(axis) + " of " + ShapeToString(*in));
    }
    out[axis] = Dim(kv);
  }
  ctx.set_output(0, dtype, out);
  ctx.set_output(1, DType::kInt64, out);
  return absl::OkStatus();
}

}  // namespace

void RegisterReductionRules(RuleRegistry& r) {
  for (const char* op : {"ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
                         "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare"}) {
    r.Register(kOnnxDomain, op, ReduceRule);
  }
  r.Register(kOnnxDomain, "ArgMax", ArgRule);
  r.Register(kOnnxDomain, "ArgMin", ArgRule);
  r.Register(kOnnxDomain, "CumSum", SameAsInputRule);
  r.Register(kOnnxDomain, "CumProd", SameAsInputRule);
  r.Register(kOnnxDomain, "TopK", TopKRule);
  RegisterIndexingRules(r);
}

}  // namespace kiln::shape
