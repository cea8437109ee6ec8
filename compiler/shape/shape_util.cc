#include "compiler/shape/shape_util.h"

#include <algorithm>

namespace kiln::shape {

absl::StatusOr<Shape> BroadcastShapes(const InferContext& ctx, const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, Dim(1));
  for (const Shape& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      Dim& o = out[rank - s.size() + i];
      const Dim& d = s[i];
      if (d.known() && d.value == 1) continue;
      if (o.known() && o.value == 1) {
        o = d;
        continue;
      }
      if (o == d) continue;
      if (o.known() && d.known()) {
        return ctx.Invalid("shapes are not broadcast-compatible: " + ShapeToString(shapes[0]) +
                           " vs " + ShapeToString(s));
      }
      // One known (> 1) and one symbolic: the known size wins (the symbol must equal it).
      if (d.known()) {
        o = d;
      } else if (!o.known()) {
        o = Dim();
      }
    }
  }
  return out;
}

absl::StatusOr<std::optional<Shape>> BroadcastInputs(const InferContext& ctx) {
  std::vector<Shape> shapes;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    std::optional<Shape> s = ctx.input_shape(i);
    if (!s) return std::optional<Shape>();
    shapes.push_back(*s);
  }
  ASSIGN_OR_RETURN(Shape out, BroadcastShapes(ctx, shapes));
  return std::optional<Shape>(std::move(out));
}

absl::StatusOr<int64_t> NormalizeAxis(const InferContext& ctx, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max<int64_t>(rank, 1)) {
    return ctx.Invalid("axis " + std::to_string(axis) + " out of range for rank " +
                       std::to_string(rank));
  }
  return a;
}

std::optional<std::vector<int64_t>> ConstantInts(const InferContext& ctx, size_t i) {
  const Tensor* t = ctx.input_constant(i);
  if (!t) return std::nullopt;
  return t->ToInt64Vector();
}

Shape UnknownDims(int64_t rank) { return Shape(static_cast<size_t>(rank), Dim()); }

absl::Status SameAsInputRule(InferContext& ctx) {
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  return absl::OkStatus();
}

}  // namespace kiln::shape
