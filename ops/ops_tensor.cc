// Reference kernels for shape-level operators (Shape, Size, Identity, Constant,
// ConstantOfShape, Reshape, Flatten, Squeeze, Unsqueeze, Expand, Tile), the helpers shared by
// the tensor-family files, and RegisterTensorKernels, which registers the whole family.
#include <algorithm>
#include <cstring>
#include <set>

#include "ops/tensor_ops.h"

namespace kiln::ref {

absl::Status CheckOutputShape(const Node& node, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  bool too_big = false;
  for (int64_t d : shape) {
    if (d < 0) return InvalidInput(node, "negative dimension in shape " + ShapeToString(shape));
  }
  for (int64_t d : shape) {
    if (d == 0) return absl::OkStatus();  // empty tensors are always fine
    if (n > kMaxOutputElements / d) too_big = true;
    if (!too_big) n *= d;
  }
  if (too_big || n > kMaxOutputElements) {
    return absl::ResourceExhaustedError(node.Describe() + ": output shape " + ShapeToString(shape) +
                                        " exceeds " + std::to_string(kMaxOutputElements) +
                                        " elements");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> ReadInts(const Node& node, const Tensor& t, const char* what) {
  if (t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32) {
    return InvalidInput(node,
                        std::string(what) + " must be int64 or int32, got " + DTypeName(t.dtype()));
  }
  if (t.rank() > 1) return InvalidInput(node, std::string(what) + " must be 1-D");
  return t.ToInt64Vector();
}

void ForEachIndex(const std::vector<int64_t>& shape,
                  const std::function<void(const std::vector<int64_t>&, int64_t)>& fn) {
  const int64_t n = NumElements(shape);
  std::vector<int64_t> coord(shape.size(), 0);
  for (int64_t flat = 0; flat < n; ++flat) {
    fn(coord, flat);
    // Odometer increment, last axis fastest.
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++coord[d] < shape[d]) break;
      coord[d] = 0;
    }
  }
}

absl::StatusOr<Tensor> GatherElements(
    const Node& node, const Tensor& src, const std::vector<int64_t>& out_shape,
    const std::function<int64_t(const std::vector<int64_t>&)>& src_index, const Tensor* fill) {
  RETURN_IF_ERROR(CheckOutputShape(node, out_shape));
  Tensor out(src.dtype(), out_shape);
  ForEachIndex(out_shape, [&](const std::vector<int64_t>& coord, int64_t flat) {
    int64_t s = src_index(coord);
    if (s >= 0) {
      CopyElement(src, s, out, flat);
    } else if (fill) {
      CopyElement(*fill, 0, out, flat);
    }
  });
  return out;
}

absl::Status CheckMovableDType(const Node& node, const Tensor& t) {
  return CheckSupportedDType(node, t.dtype());
}

absl::StatusOr<std::vector<int64_t>> NormalizeAxes(const Node& node,
                                                   const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> out;
  std::set<int64_t> seen;
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) {
      return InvalidInput(
          node, "axis " + std::to_string(a) + " out of range for rank " + std::to_string(rank));
    }
    int64_t n = a < 0 ? a + rank : a;
    if (!seen.insert(n).second) return InvalidInput(node, "duplicate axis " + std::to_string(a));
    out.push_back(n);
  }
  return out;
}

namespace {

using Outs = absl::StatusOr<std::vector<Tensor>>;

Outs ShapeKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  const int64_t rank = x->rank();
  auto clamp = [rank](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
  int64_t start = clamp(node.GetInt("start", 0));
  int64_t end = clamp(node.GetInt("end", rank));
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back(x->dim(i));
  return std::vector<Tensor>{Tensor::FromInt64(dims, {static_cast<int64_t>(dims.size())})};
}

Outs SizeKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  return std::vector<Tensor>{Tensor::FromInt64({x->numel()}, {})};
}

Outs IdentityKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  return std::vector<Tensor>{*x};  // tensors are immutable: sharing the buffer is safe
}

Outs ConstantKernel(const Node& node, const KernelInputs&) {
  if (const Attribute* a = node.FindAttr("value")) {
    RETURN_IF_ERROR(CheckSupportedDType(node, a->t.dtype()));
    return std::vector<Tensor>{a->t};
  }
  if (const Attribute* a = node.FindAttr("value_float")) {
    return std::vector<Tensor>{Tensor::Scalar(DType::kFloat32, a->f)};
  }
  if (const Attribute* a = node.FindAttr("value_int")) {
    return std::vector<Tensor>{Tensor::FromInt64({a->i}, {})};
  }
  if (const Attribute* a = node.FindAttr("value_floats")) {
    return std::vector<Tensor>{
        Tensor::FromFloat(a->floats, {static_cast<int64_t>(a->floats.size())})};
  }
  if (const Attribute* a = node.FindAttr("value_ints")) {
    return std::vector<Tensor>{Tensor::FromInt64(a->ints, {static_cast<int64_t>(a->ints.size())})};
  }
  return Unsupported(node, "Constant needs a value, value_float(s) or value_int(s) attribute");
}

Outs ConstantOfShapeKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* s, RequireInput(node, in, 0));
  if (s->dtype() != DType::kInt64) return InvalidInput(node, "shape must be int64");
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, ReadInts(node, *s, "shape"));
  Tensor value = Tensor::Scalar(DType::kFloat32, 0.0);
  if (const Attribute* a = node.FindAttr("value")) {
    RETURN_IF_ERROR(CheckSupportedDType(node, a->t.dtype()));
    if (a->t.numel() != 1) return InvalidInput(node, "value must have exactly one element");
    value = a->t;
  }
  RETURN_IF_ERROR(CheckOutputShape(node, shape));
  Tensor out(value.dtype(), shape);
  for (int64_t i = 0; i < out.numel(); ++i) CopyElement(value, 0, out, i);
  return std::vector<Tensor>{out};
}

}  // namespace

// Resolves Reshape's target (0 copies the input dim unless allowzero, one -1 is inferred).
absl::StatusOr<std::vector<int64_t>> ReshapeTarget(const Node& node,
                                                   const std::vector<int64_t>& in_shape,
                                                   std::vector<int64_t> target, bool allowzero) {
  int64_t infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t& d = target[i];
    if (d == 0 && !allowzero) {
      if (i >= in_shape.size()) return InvalidInput(node, "0 in shape copies a missing dim");
      d = in_shape[i];
    }
    if (d == -1) {
      if (infer_at >= 0) return InvalidInput(node, "more than one -1 in shape");
      infer_at = static_cast<int64_t>(i);
      continue;
    }
    if (d < 0) return InvalidInput(node, "invalid dimension " + std::to_string(d) + " in shape");
    if (d > 0 && known > kMaxOutputElements / d) {
      return InvalidInput(node, "shape " + ShapeToString(target) + " is too large");
    }
    known *= d;
  }
  const int64_t numel = NumElements(in_shape);
  if (infer_at >= 0) {
    if (known == 0 || numel % known != 0) {
      return InvalidInput(
          node, "cannot reshape " + ShapeToString(in_shape) + " to " + ShapeToString(target));
    }
    target[infer_at] = numel / known;
  } else if (known != numel) {
    return InvalidInput(node, "cannot reshape " + ShapeToString(in_shape) + " (" +
                                  std::to_string(numel) + " elements) to " + ShapeToString(target));
  }
  return target;
}

namespace {

Outs ReshapeKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* s, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  ASSIGN_OR_RETURN(std::vector<int64_t> target, ReadInts(node, *s, "shape"));
  ASSIGN_OR_RETURN(std::vector<int64_t> out,
                   ReshapeTarget(node, x->shape(), target, node.GetInt("allowzero", 0) != 0));
  return std::vector<Tensor>{x->Reshaped(out)};
}

Outs FlattenKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  const int64_t rank = x->rank();
  int64_t axis = node.GetInt("axis", 1);
  if (axis < -rank || axis > rank) return InvalidInput(node, "axis out of range");
  if (axis < 0) axis += rank;
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x->dim(i);
  int64_t inner = 1;
  for (int64_t i = axis; i < rank; ++i) inner *= x->dim(i);
  return std::vector<Tensor>{x->Reshaped({outer, inner})};
}

Outs SqueezeKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  std::set<int64_t> drop;
  if (in.size() > 1 && in[1]) {
    ASSIGN_OR_RETURN(std::vector<int64_t> axes, ReadInts(node, *in[1], "axes"));
    ASSIGN_OR_RETURN(axes, NormalizeAxes(node, axes, x->rank()));
    for (int64_t a : axes) {
      if (x->dim(a) != 1) {
        return InvalidInput(node, "cannot squeeze axis " + std::to_string(a) + " of size " +
                                      std::to_string(x->dim(a)));
      }
      drop.insert(a);
    }
  } else {
    for (int64_t i = 0; i < x->rank(); ++i) {
      if (x->dim(i) == 1) drop.insert(i);
    }
  }
  std::vector<int64_t> out;
  for (int64_t i = 0; i < x->rank(); ++i) {
    if (!drop.count(i)) out.push_back(x->dim(i));
  }
  return std::vector<Tensor>{x->Reshaped(out)};
}

Outs UnsqueezeKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* a, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  ASSIGN_OR_RETURN(std::vector<int64_t> axes, ReadInts(node, *a, "axes"));
  const int64_t out_rank = x->rank() + static_cast<int64_t>(axes.size());
  ASSIGN_OR_RETURN(axes, NormalizeAxes(node, axes, out_rank));
  std::vector<int64_t> out(out_rank, 1);
  std::set<int64_t> ones(axes.begin(), axes.end());
  int64_t k = 0;
  for (int64_t i = 0; i < out_rank; ++i) {
    if (!ones.count(i)) out[i] = x->dim(k++);
  }
  return std::vector<Tensor>{x->Reshaped(out)};
}

Outs ExpandKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* s, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, ReadInts(node, *s, "shape"));
  for (int64_t d : shape) {
    if (d < 0) return InvalidInput(node, "negative dimension in shape " + ShapeToString(shape));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShapes(node, {x->shape(), shape}));
  RETURN_IF_ERROR(CheckOutputShape(node, out));
  BroadcastIndexer index(x->shape(), out);
  Tensor y(x->dtype(), out);
  for (int64_t i = 0; i < y.numel(); ++i) CopyElement(*x, index(i), y, i);
  return std::vector<Tensor>{y};
}

Outs TileKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* r, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  ASSIGN_OR_RETURN(std::vector<int64_t> repeats, ReadInts(node, *r, "repeats"));
  if (static_cast<int64_t>(repeats.size()) != x->rank()) {
    return InvalidInput(node, "repeats must have one entry per input dimension");
  }
  std::vector<int64_t> out(repeats.size());
  for (size_t i = 0; i < repeats.size(); ++i) {
    if (repeats[i] < 0) return InvalidInput(node, "repeats must be non-negative");
    if (x->dim(i) > 0 && repeats[i] > kMaxOutputElements / x->dim(i)) {
      return absl::ResourceExhaustedError(node.Describe() + ": tiled output is too large");
    }
    out[i] = x->dim(i) * repeats[i];
  }
  std::vector<int64_t> strides = Strides(x->shape());
  ASSIGN_OR_RETURN(Tensor y, GatherElements(node, *x, out, [&](const std::vector<int64_t>& c) {
                     int64_t s = 0;
                     for (size_t d = 0; d < c.size(); ++d) s += (c[d] % x->dim(d)) * strides[d];
                     return s;
                   }));
  return std::vector<Tensor>{y};
}

}  // namespace

void RegisterShapeKernels(KernelRegistry& r) {
  r.Register("", "Shape", ShapeKernel);
  r.Register("", "Size", SizeKernel);
  r.Register("", "Identity", IdentityKernel);
  r.Register("", "Constant", ConstantKernel);
  r.Register("", "ConstantOfShape", ConstantOfShapeKernel);
  r.Register("", "Reshape", ReshapeKernel);
  r.Register("", "Flatten", FlattenKernel);
  r.Register("", "Squeeze", SqueezeKernel);
  r.Register("", "Unsqueeze", UnsqueezeKernel);
  r.Register("", "Expand", ExpandKernel);
  r.Register("", "Tile", TileKernel);
}

void RegisterTensorKernels(KernelRegistry& r) {
  RegisterShapeKernels(r);
  RegisterLayoutKernels(r);
  RegisterCastKernels(r);
  RegisterResizeKernels(r);
  RegisterSelectKernels(r);
  RegisterReorderKernels(r);
}

}  // namespace kiln::ref
