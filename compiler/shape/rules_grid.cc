// Shape rules for GridSample, (N, C) of X followed by the grid's spatial dims, and AffineGrid,
// (N, D1..Dr, r) from a constant size input (else r spatial dims of unknown size, r read from
// theta's (N, r, r + 1) shape).
#include "compiler/shape/nn_rules.h"
#include "compiler/shape/shape_util.h"

namespace kiln::shape {
namespace {

absl::Status GridSampleRule(InferContext& ctx) {
  std::optional<Shape> x = ctx.input_shape(0), grid = ctx.input_shape(1);
  if (!x || !grid) {
    ctx.set_output(0, ctx.input_dtype(0), std::nullopt);
    return absl::OkStatus();
  }
  if (x->size() < 3 || grid->size() != x->size()) {
    return ctx.Invalid("X " + ShapeToString(*x) + " and Grid " + ShapeToString(*grid) +
                       " do not fit");
  }
  const Dim& last = grid->back();
  if (last.known() && last.value != static_cast<int64_t>(x->size()) - 2) {
    return ctx.Invalid("Grid's last dim must be the number of spatial dims");
  }
  Shape out{(*x)[0], (*x)[1]};
  out.insert(out.end(), grid->begin() + 1, grid->end() - 1);
  ctx.set_output(0, ctx.input_dtype(0), out);
  return absl::OkStatus();
}

absl::Status AffineGridRule(InferContext& ctx) {
  const DType dt = ctx.input_dtype(0);
  if (std::optional<std::vector<int64_t>> size = ConstantInts(ctx, 1)) {
    if (size->size() != 4 && size->size() != 5) return ctx.Invalid("size must have 4 or 5 values");
    const int64_t r = static_cast<int64_t>(size->size()) - 2;
    Shape out{Dim((*size)[0])};
    for (int64_t d = 0; d < r; ++d) out.push_back(Dim((*size)[2 + d]));
    out.push_back(Dim(r));
    ctx.set_output(0, dt, out);
    return absl::OkStatus();
  }
  std::optional<Shape> theta = ctx.input_shape(0);
  if (!theta || theta->size() != 3 || !(*theta)[1].known()) {
    ctx.set_output(0, dt, std::nullopt);
    return absl::OkStatus();
  }
  const int64_t r = (*theta)[1].value;
  if (r != 2 && r != 3) return ctx.Invalid("theta must be (N, 2, 3) or (N, 3, 4)");
  Shape out = UnknownDims(r + 2);
  out[0] = (*theta)[0];
  out.back() = Dim(r);
  ctx.set_output(0, dt, out);
  return absl::OkStatus();
}

}  // namespace

void RegisterGridRules(RuleRegistry& r) {
  r.Register("", "GridSample", GridSampleRule);
  r.Register("", "AffineGrid", AffineGridRule);
}

}  // namespace kiln::shape
