// Shape rules for shape-level operators: Shape, Size, Identity, Cast, CastLike, Constant,
// ConstantOfShape, Reshape, Flatten, Squeeze, Unsqueeze, Expand, Tile.
//
// These make PyTorch's shape subgraphs (Shape -> Gather -> Unsqueeze -> Concat -> Reshape)
// resolve: Shape of a static input becomes a constant, the rest fold through the reference
// kernels once their inputs are constant, and Reshape/Expand/Tile read constant operands to
// compute exact (possibly symbolic) output shapes.
#include <algorithm>
#include <set>

#include "compiler/shape/shape_util.h"
#include "compiler/shape/tensor_rules.h"

namespace kiln::shape {

Dim DimProduct(const std::vector<Dim>& dims) {
  if (dims.size() == 1) return dims[0];
  int64_t n = 1;
  for (const Dim& d : dims) {
    if (d.known() && d.value == 0) return Dim(0);
  }
  for (const Dim& d : dims) {
    if (!d.known()) return Dim();
    n *= d.value;
  }
  return Dim(n);
}

void SetLikeInput(InferContext& ctx, size_t out, DType dtype) {
  ctx.set_output(out, dtype, ctx.input_shape(0));
}

std::optional<std::vector<int64_t>> OptionalConstInts(const InferContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return std::nullopt;
  return ConstantInts(ctx, i);
}

namespace {

absl::Status ShapeRule(InferContext& ctx) {
  std::optional<Shape> s = ctx.input_shape(0);
  if (!s) {
    ctx.set_output(0, DType::kInt64, Shape{Dim()});
    return absl::OkStatus();
  }
  const int64_t rank = static_cast<int64_t>(s->size());
  auto clamp = [rank](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
  const int64_t start = clamp(ctx.node().GetInt("start", 0));
  const int64_t end = std::max(start, clamp(ctx.node().GetInt("end", rank)));
  Shape picked(s->begin() + start, s->begin() + end);
  if (IsStatic(picked)) {
    std::vector<int64_t> dims = StaticDims(picked);
    ctx.set_output_constant(0, Tensor::FromInt64(dims, {static_cast<int64_t>(dims.size())}));
  } else {
    ctx.set_output(0, DType::kInt64, Shape{Dim(end - start)});
  }
  return absl::OkStatus();
}

absl::Status SizeRule(InferContext& ctx) {
  std::optional<Shape> s = ctx.input_shape(0);
  if (s && IsStatic(*s)) {
    ctx.set_output_constant(0, Tensor::FromInt64({NumElements(StaticDims(*s))}, {}));
  } else {
    ctx.set_output(0, DType::kInt64, Shape{});
  }
  return absl::OkStatus();
}

absl::Status IdentityRule(InferContext& ctx) {
  SetLikeInput(ctx, 0, ctx.input_dtype(0));
  return absl::OkStatus();
}

absl::Status CastRule(InferContext& ctx) {
  const int64_t to = ctx.node().GetInt("to", 0);
  if (to <= 0 || to > 1000) return ctx.Invalid("'to' is not a valid ONNX dtype");
  SetLikeInput(ctx, 0, static_cast<DType>(to));
  return absl::OkStatus();
}

absl::Status CastLikeRule(InferContext& ctx) {
  SetLikeInput(ctx, 0, ctx.input_dtype(1));
  return absl::OkStatus();
}

absl::Status ConstantRule(InferContext& ctx) {
  const Node& n = ctx.node();
  if (const Attribute* a = n.FindAttr("value")) {
    ctx.set_output_constant(0, a->t);
  } else if (const Attribute* a = n.FindAttr("value_float")) {
    ctx.set_output_constant(0, Tensor::Scalar(DType::kFloat32, a->f));
  } else if (const Attribute* a = n.FindAttr("value_int")) {
    ctx.set_output_constant(0, Tensor::FromInt64({a->i}, {}));
  } else if (const Attribute* a = n.FindAttr("value_floats")) {
    ctx.set_output_constant(
        0, Tensor::FromFloat(a->floats, {static_cast<int64_t>(a->floats.size())}));
  } else if (const Attribute* a = n.FindAttr("value_ints")) {
    ctx.set_output_constant(0,
                            Tensor::FromInt64(a->ints, {static_cast<int64_t>(a->ints.size())}));
  } else {
    return ctx.Unsupported("Constant needs a value, value_float(s) or value_int(s) attribute");
  }
  return absl::OkStatus();
}

// Rank-r shape of unknown dims when input i is a 1-D tensor of known length r.
std::optional<Shape> RankFromShapeInput(const InferContext& ctx, size_t i) {
  std::optional<Shape> s = ctx.input_shape(i);
  if (!s || s->size() != 1 || !(*s)[0].known()) return std::nullopt;
  return UnknownDims((*s)[0].value);
}

absl::Status ConstantOfShapeRule(InferContext& ctx) {
  const Attribute* a = ctx.node().FindAttr("value");
  DType dtype = a ? a->t.dtype() : DType::kFloat32;
  std::optional<std::vector<int64_t>> dims = ConstantInts(ctx, 0);
  if (dims) {
    for (int64_t d : *dims) {
      if (d < 0) return ctx.Invalid("negative dimension in shape");
    }
    ctx.set_output(0, dtype, ToShape(*dims));
  } else {
    ctx.set_output(0, dtype, RankFromShapeInput(ctx, 0));
  }
  return absl::OkStatus();
}


// Infers Reshape's -1 symbolically: input dims copied by 0 cancel against themselves, and
// when the rest of the input is one symbol times the known target product, -1 is that
// symbol ([N,3,4] -> [-1,12] gives [N,12]).
absl::Status InferMinusOne(const InferContext& ctx, const Shape& in,
                           const std::set<size_t>& copied, Shape& out, size_t at) {
  int64_t in_known = 1, target_known = 1;
  std::vector<Dim> in_syms;
  for (size_t i = 0; i < in.size(); ++i) {
    if (copied.count(i)) continue;
    if (in[i].known()) {
      in_known *= in[i].value;
    } else {
      in_syms.push_back(in[i]);
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (i != at && !copied.count(i)) target_known *= out[i].value;
  }
  if (in_syms.empty()) {
    if (target_known == 0 || in_known % target_known != 0) {
      return ctx.Invalid("cannot reshape " + ShapeToString(in) + " to " + ShapeToString(out));
    }
    out[at] = Dim(in_known / target_known);
  } else if (in_syms.size() == 1 && in_known == target_known && target_known != 0) {
    out[at] = in_syms[0];
  }
  return absl::OkStatus();
}

absl::StatusOr<Shape> ReshapeShape(const InferContext& ctx, const std::optional<Shape>& in,
                                   const std::vector<int64_t>& target, bool allowzero) {
  Shape out(target.size(), Dim());
  std::set<size_t> copied;
  std::optional<size_t> infer_at;
  for (size_t i = 0; i < target.size(); ++i) {
    const int64_t t = target[i];
    if (t == 0 && !allowzero) {
      if (in && i >= in->size()) return ctx.Invalid("0 in shape copies a missing dim");
      if (in) out[i] = (*in)[i];
      copied.insert(i);
    } else if (t == -1) {
      if (infer_at) return ctx.Invalid("more than one -1 in shape");
      infer_at = i;
    } else if (t < 0) {
      return ctx.Invalid("invalid dimension " + std::to_string(t) + " in shape");
    } else {
      out[i] = Dim(t);
    }
  }
  if (!in) return out;
  if (infer_at) {
    RETURN_IF_ERROR(InferMinusOne(ctx, *in, copied, out, *infer_at));
  } else if (IsStatic(*in) && IsStatic(out) &&
             NumElements(StaticDims(*in)) != NumElements(StaticDims(out))) {
    return ctx.Invalid("cannot reshape " + ShapeToString(*in) + " to " + ShapeToString(out));
  }
  return out;
}

absl::Status ReshapeRule(InferContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  std::optional<std::vector<int64_t>> target = ConstantInts(ctx, 1);
  if (!target) {
    ctx.set_output(0, dtype, RankFromShapeInput(ctx, 1));
    return absl::OkStatus();
  }
  const bool allowzero = ctx.node().GetInt("allowzero", 0) != 0;
  ASSIGN_OR_RETURN(Shape out, ReshapeShape(ctx, ctx.input_shape(0), *target, allowzero));
  ctx.set_output(0, dtype, out);
  return absl::OkStatus();
}

absl::Status FlattenRule(InferContext& ctx) {
  std::optional<Shape> s = ctx.input_shape(0);
  if (!s) {
    ctx.set_output(0, ctx.input_dtype(0), UnknownDims(2));
    return absl::OkStatus();
  }
  const int64_t rank = static_cast<int64_t>(s->size());
  int64_t axis = ctx.node().GetInt("axis", 1);
  if (axis < -rank || axis > rank) return ctx.Invalid("axis out of range");
  if (axis < 0) axis += rank;
  Dim outer = axis == 0 ? Dim(1) : DimProduct(std::vector<Dim>(s->begin(), s->begin() + axis));
  Dim inner = axis == rank ? Dim(1) : DimProduct(std::vector<Dim>(s->begin() + axis, s->end()));
  ctx.set_output(0, ctx.input_dtype(0), Shape{outer, inner});
  return absl::OkStatus();
}

absl::Status SqueezeRule(InferContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  std::optional<Shape> s = ctx.input_shape(0);
  std::optional<std::vector<int64_t>> axes = OptionalConstInts(ctx, 1);
  if (!s || (ctx.has_input(1) && !axes)) {
    ctx.set_output(0, dtype, std::nullopt);
    return absl::OkStatus();
  }
  const int64_t rank = static_cast<int64_t>(s->size());
  std::set<int64_t> drop;
  if (axes) {
    for (int64_t a : *axes) {
      ASSIGN_OR_RETURN(int64_t n, NormalizeAxis(ctx, a, rank));
      if ((*s)[n].known() && (*s)[n].value != 1) return ctx.Invalid("cannot squeeze a dim != 1");
      drop.insert(n);
    }
  } else {
    for (int64_t i = 0; i < rank; ++i) {
      if (!(*s)[i].known()) {  // might be 1: the output rank is unknown
        ctx.set_output(0, dtype, std::nullopt);
        return absl::OkStatus();
      }
      if ((*s)[i].value == 1) drop.insert(i);
    }
  }
  Shape out;
  for (int64_t i = 0; i < rank; ++i) {
    if (!drop.count(i)) out.push_back((*s)[i]);
  }
  ctx.set_output(0, dtype, out);
  return absl::OkStatus();
}

absl::Status UnsqueezeRule(InferContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  std::optional<Shape> s = ctx.input_shape(0);
  std::optional<std::vector<int64_t>> axes = ConstantInts(ctx, 1);
  if (!s || !axes) {
    ctx.set_output(0, dtype, std::nullopt);
    return absl::OkStatus();
  }
  const int64_t out_rank = static_cast<int64_t>(s->size() + axes->size());
  std::set<int64_t> ones;
  for (int64_t a : *axes) {
    ASSIGN_OR_RETURN(int64_t n, NormalizeAxis(ctx, a, out_rank));
    if (!ones.insert(n).second) return ctx.Invalid("duplicate axis in axes");
  }
  Shape out;
  size_t k = 0;
  for (int64_t i = 0; i < out_rank; ++i) out.push_back(ones.count(i) ? Dim(1) : (*s)[k++]);
  ctx.set_output(0, dtype, out);
  return absl::OkStatus();
}

absl::Status ExpandRule(InferContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  std::optional<Shape> s = ctx.input_shape(0);
  std::optional<std::vector<int64_t>> target = ConstantInts(ctx, 1);
  if (!s || !target) {
    std::optional<Shape> r = RankFromShapeInput(ctx, 1);
    if (s && r) r = UnknownDims(std::max(r->size(), s->size()));
    ctx.set_output(0, dtype, s ? r : std::nullopt);
    return absl::OkStatus();
  }
  for (int64_t d : *target) {
    if (d < 0) return ctx.Invalid("negative dimension in shape");
  }
  ASSIGN_OR_RETURN(Shape out, BroadcastShapes(ctx, {*s, ToShape(*target)}));
  ctx.set_output(0, dtype, out);
  return absl::OkStatus();
}

absl::Status TileRule(InferContext& ctx) {
  const DType dtype = ctx.input_dtype(0);
  std::optional<Shape> s = ctx.input_shape(0);
  std::optional<std::vector<int64_t>> reps = ConstantInts(ctx, 1);
  if (!s || !reps) {
    ctx.set_output(0, dtype, s ? std::optional<Shape>(UnknownDims(s->size())) : std::nullopt);
    return absl::OkStatus();
  }
  if (reps->size() != s->size()) return ctx.Invalid("repeats must match the input rank");
  Shape out;
  for (size_t i = 0; i < s->size(); ++i) {
    const Dim& d = (*s)[i];
    const int64_t r = (*reps)[i];
    if (r < 0) return ctx.Invalid("repeats must be non-negative");
    out.push_back(r == 1 ? d : r == 0 ? Dim(0) : d.known() ? Dim(d.value * r) : Dim());
  }
  ctx.set_output(0, dtype, out);
  return absl::OkStatus();
}

}  // namespace

void RegisterTensorRules(RuleRegistry& r) {
  r.Register("", "Shape", ShapeRule);
  r.Register("", "Size", SizeRule);
  r.Register("", "Identity", IdentityRule);
  r.Register("", "Cast", CastRule);
  r.Register("", "CastLike", CastLikeRule);
  r.Register("", "Constant", ConstantRule);
  r.Register("", "ConstantOfShape", ConstantOfShapeRule);
  r.Register("", "Reshape", ReshapeRule);
  r.Register("", "Flatten", FlattenRule);
  r.Register("", "Squeeze", SqueezeRule);
  r.Register("", "Unsqueeze", UnsqueezeRule);
  r.Register("", "Expand", ExpandRule);
  r.Register("", "Tile", TileRule);
  RegisterLayoutRules(r);
  RegisterSelectRules(r);
}

}  // namespace kiln::shape
