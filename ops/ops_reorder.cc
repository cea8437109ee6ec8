// Data movement along chosen axes: ReverseSequence (the first sequence_lens[b] steps of each
// batch entry reversed), CenterCropPad (each listed axis cropped or zero-padded to the target
// size around its centre; the extra element of an odd difference goes to the end) and
// TensorScatter (opset 24: a KV-cache update written at write_indices[b] along `axis`,
// linearly or wrapping around).
#include "ops/tensor_ops.h"

namespace kiln::ref {
namespace {

absl::StatusOr<std::vector<Tensor>> ReverseSequence(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* lens_t, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  const int64_t batch_axis = node.GetInt("batch_axis", 1), time_axis = node.GetInt("time_axis", 0);
  if (x->rank() < 2 ||
      !((batch_axis == 0 && time_axis == 1) || (batch_axis == 1 && time_axis == 0))) {
    return InvalidInput(node, "batch_axis and time_axis must be 0 and 1 of a rank >= 2 tensor");
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> lens, ReadInts(node, *lens_t, "sequence_lens"));
  if (static_cast<int64_t>(lens.size()) != x->dim(batch_axis)) {
    return InvalidInput(node, "sequence_lens must have one entry per batch element");
  }
  for (int64_t l : lens) {
    if (l < 0 || l > x->dim(time_axis)) return InvalidInput(node, "sequence length out of range");
  }
  ASSIGN_OR_RETURN(Tensor y,
                   GatherElements(node, *x, x->shape(), [&](const std::vector<int64_t>& c) {
                     std::vector<int64_t> src = c;
                     const int64_t len = lens[c[batch_axis]];
                     if (c[time_axis] < len) src[time_axis] = len - 1 - c[time_axis];
                     int64_t flat = 0;
                     for (size_t d = 0; d < src.size(); ++d) flat = flat * x->dim(d) + src[d];
                     return flat;
                   }));
  return std::vector<Tensor>{std::move(y)};
}

absl::StatusOr<std::vector<Tensor>> CenterCropPad(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* shape_t, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  ASSIGN_OR_RETURN(std::vector<int64_t> target, ReadInts(node, *shape_t, "shape"));
  std::vector<int64_t> axes = node.GetInts("axes");
  if (axes.empty()) {
    for (int64_t d = 0; d < x->rank(); ++d) axes.push_back(d);
  }
  ASSIGN_OR_RETURN(axes, NormalizeAxes(node, axes, x->rank()));
  if (axes.size() != target.size()) {
    return InvalidInput(node, "shape must have one entry per axis");
  }
  std::vector<int64_t> out = x->shape(), offset(x->rank(), 0);  // src = dst + offset
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t d = axes[i];
    if (target[i] < 0) return InvalidInput(node, "negative target size");
    out[d] = target[i];
    offset[d] =
        x->dim(d) >= target[i] ? (x->dim(d) - target[i]) / 2 : -((target[i] - x->dim(d)) / 2);
  }
  ASSIGN_OR_RETURN(Tensor y, GatherElements(node, *x, out, [&](const std::vector<int64_t>& c) {
                     int64_t flat = 0;
                     for (size_t d = 0; d < c.size(); ++d) {
                       const int64_t s = c[d] + offset[d];
                       if (s < 0 || s >= x->dim(d)) return int64_t{-1};
                       flat = flat * x->dim(d) + s;
                     }
                     return flat;
                   }));
  return std::vector<Tensor>{std::move(y)};
}

absl::StatusOr<std::vector<Tensor>> TensorScatter(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* past, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* update, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckMovableDType(node, *past));
  if (update->dtype() != past->dtype() || update->rank() != past->rank() || past->rank() < 2) {
    return InvalidInput(node, "update must match past_cache's dtype and rank (>= 2)");
  }
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, node.GetInt("axis", -2), past->rank()));
  if (axis == 0) return InvalidInput(node, "axis cannot be the batch axis");
  for (int64_t d = 0; d < past->rank(); ++d) {
    if (d != axis && update->dim(d) != past->dim(d)) {
      return InvalidInput(node, "update " + ShapeToString(update->shape()) + " does not fit " +
                                    ShapeToString(past->shape()));
    }
  }
  const std::string mode = node.GetString("mode", "linear");
  if (mode != "linear" && mode != "circular") return InvalidInput(node, "unknown mode " + mode);
  std::vector<int64_t> starts(past->dim(0), 0);
  if (in.size() > 2 && in[2]) {
    ASSIGN_OR_RETURN(starts, ReadInts(node, *in[2], "write_indices"));
    if (static_cast<int64_t>(starts.size()) != past->dim(0)) {
      return InvalidInput(node, "write_indices must have one entry per batch element");
    }
  }
  const int64_t max_len = past->dim(axis);
  if (max_len == 0 && update->numel() > 0) return InvalidInput(node, "the cache has no room");
  Tensor y = past->Clone();
  const std::vector<int64_t> us = Strides(update->shape()), ps = Strides(past->shape());
  for (int64_t i = 0; i < update->numel(); ++i) {
    int64_t dst = 0;
    for (int64_t d = 0; d < update->rank(); ++d) {
      int64_t c = i / us[d] % update->dim(d);
      if (d == axis) {
        c += starts[i / us[0]];
        if (mode == "circular") c = ((c % max_len) + max_len) % max_len;
        if (c < 0 || c >= max_len) return InvalidInput(node, "write position out of the cache");
      }
      dst += c * ps[d];
    }
    CopyElement(*update, i, y, dst);
  }
  return std::vector<Tensor>{std::move(y)};
}

}  // namespace

void RegisterReorderKernels(KernelRegistry& r) {
  r.Register(kOnnxDomain, "ReverseSequence", ReverseSequence);
  r.Register(kOnnxDomain, "CenterCropPad", CenterCropPad);
  r.Register(kOnnxDomain, "TensorScatter", TensorScatter);
}

}  // namespace kiln::ref
