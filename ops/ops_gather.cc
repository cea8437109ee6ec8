// Reference kernels for indexing: Gather, GatherElements, GatherND, ScatterElements,
// ScatterND. Every index is range-checked (negative indices count from the end) before it
// is used, so a bad index is an INVALID_ARGUMENT error, never an out-of-bounds access.
// Elements are moved bytewise (CopyElement), so these work for every supported dtype.
#include <algorithm>
#include <string>

#include "ops/reduction_ops.h"

namespace kiln::ref {
namespace {

int64_t Product(const std::vector<int64_t>& shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t d = begin; d < end && d < shape.size(); ++d) n *= shape[d];
  return n;
}

// Coordinates of a flat row-major index.
std::vector<int64_t> Unravel(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> c(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    c[d] = flat % shape[d];
    flat /= shape[d];
  }
  return c;
}

absl::StatusOr<std::vector<Tensor>> GatherKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* data, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* indices, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckSupportedDType(node, data->dtype()));
  RETURN_IF_ERROR(CheckIndexDType(node, *indices, "indices"));
  if (data->rank() == 0) return InvalidInput(node, "data must have rank >= 1");
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, node.GetInt("axis", 0), data->rank()));
  const std::vector<int64_t>& ds = data->shape();
  std::vector<int64_t> out_shape(ds.begin(), ds.begin() + axis);
  out_shape.insert(out_shape.end(), indices->shape().begin(), indices->shape().end());
  out_shape.insert(out_shape.end(), ds.begin() + axis + 1, ds.end());
  RETURN_IF_ERROR(CheckOutputSize(node, out_shape));
  std::vector<int64_t> idx(indices->numel());
  for (int64_t j = 0; j < indices->numel(); ++j) {
    ASSIGN_OR_RETURN(idx[j], NormalizeIndex(node, indices->GetInt(j), ds[axis]));
  }
  Tensor y(data->dtype(), out_shape);
  const int64_t outer = Product(ds, 0, axis), dim = ds[axis];
  const int64_t inner = Product(ds, axis + 1, ds.size());
  const auto n = static_cast<int64_t>(idx.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < inner; ++i) {
        CopyElement(*data, (o * dim + idx[j]) * inner + i, y, (o * n + j) * inner + i);
      }
    }
  }
  return std::vector<Tensor>{std::move(y)};
}

// GatherElements and ScatterElements index one axis per element: `indices` has the data's
// rank, and every other dim must fit inside the data's.
absl::Status CheckElementwiseIndices(const Node& node, const Tensor& data, const Tensor& indices,
                                     int64_t axis) {
  if (indices.rank() != data.rank()) {
    return InvalidInput(node, "indices rank " + std::to_string(indices.rank()) +
                                  " differs from data rank " + std::to_string(data.rank()));
  }
  for (int64_t d = 0; d < data.rank(); ++d) {
    if (d != axis && indices.dim(d) > data.dim(d)) {
      return InvalidInput(node, "indices shape " + ShapeToString(indices.shape()) +
                                    " exceeds data shape " + ShapeToString(data.shape()));
    }
  }
  return absl::OkStatus();
}

// Flat data offset for each element of `indices`, replacing the coordinate along `axis`.
absl::StatusOr<std::vector<int64_t>> ElementOffsets(const Node& node, const Tensor& data,
                                                    const Tensor& indices, int64_t axis) {
  RETURN_IF_ERROR(CheckIndexDType(node, indices, "indices"));
  RETURN_IF_ERROR(CheckElementwiseIndices(node, data, indices, axis));
  std::vector<int64_t> strides = Strides(data.shape());
  std::vector<int64_t> offsets(indices.numel());
  for (int64_t k = 0; k < indices.numel(); ++k) {
    std::vector<int64_t> c = Unravel(k, indices.shape());
    ASSIGN_OR_RETURN(c[axis], NormalizeIndex(node, indices.GetInt(k), data.dim(axis)));
    int64_t off = 0;
    for (size_t d = 0; d < c.size(); ++d) off += c[d] * strides[d];
    offsets[k] = off;
  }
  return offsets;
}

absl::StatusOr<std::vector<Tensor>> GatherElementsKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* data, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* indices, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckSupportedDType(node, data->dtype()));
  if (data->rank() == 0) return InvalidInput(node, "data must have rank >= 1");
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, node.GetInt("axis", 0), data->rank()));
  ASSIGN_OR_RETURN(std::vector<int64_t> offsets, ElementOffsets(node, *data, *indices, axis));
  Tensor y(data->dtype(), indices->shape());
  for (size_t k = 0; k < offsets.size(); ++k) {
    CopyElement(*data, offsets[k], y, static_cast<int64_t>(k));
  }
  return std::vector<Tensor>{std::move(y)};
}

// GatherND / ScatterND: each index tuple (the last dim of `indices`) addresses a slice of
// `data`. Returns the flat data offset of each tuple's slice; `batch_dims` leading dims are
// shared by data and indices (GatherND only; ScatterND passes 0).
absl::StatusOr<std::vector<int64_t>> TupleOffsets(const Node& node, const Tensor& data,
                                                  const Tensor& indices, int64_t batch_dims) {
  RETURN_IF_ERROR(CheckIndexDType(node, indices, "indices"));
  const int64_t r = data.rank(), q = indices.rank();
  if (q < 1 || batch_dims < 0 || batch_dims >= std::min(q, r)) {
    return InvalidInput(node, "invalid batch_dims " + std::to_string(batch_dims) +
                                  " for data rank " + std::to_string(r) + ", indices rank " +
                                  std::to_string(q));
  }
  const int64_t m = indices.dim(q - 1);
  if (m < 1 || m > r - batch_dims) {
    return InvalidInput(node, "indices last dim " + std::to_string(m) + " out of range");
  }
  for (int64_t d = 0; d < batch_dims; ++d) {
    if (data.dim(d) != indices.dim(d)) {
      return InvalidInput(node, "batch dims of data and indices differ");
    }
  }
  const int64_t tuples = indices.numel() / m;
  const int64_t per_batch = Product(indices.shape(), batch_dims, q - 1);
  const int64_t batch_stride = Product(data.shape(), batch_dims, r);
  std::vector<int64_t> strides = Strides(data.shape());
  std::vector<int64_t> offsets(tuples);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = per_batch > 0 ? (t / per_batch) * batch_stride : 0;
    for (int64_t j = 0; j < m; ++j) {
      const int64_t d = batch_dims + j;
      ASSIGN_OR_RETURN(int64_t idx, NormalizeIndex(node, indices.GetInt(t * m + j), data.dim(d)));
      off += idx * strides[d];
    }
    offsets[t] = off;
  }
  return offsets;
}

absl::StatusOr<std::vector<Tensor>> GatherNDKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* data, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* indices, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckSupportedDType(node, data->dtype()));
  const int64_t b = node.GetInt("batch_dims", 0);
  ASSIGN_OR_RETURN(std::vector<int64_t> offsets, TupleOffsets(node, *data, *indices, b));
  const int64_t m = indices->dim(indices->rank() - 1);
  std::vector<int64_t> out_shape(indices->shape().begin(), indices->shape().end() - 1);
  out_shape.insert(out_shape.end(), data->shape().begin() + b + m, data->shape().end());
  RETURN_IF_ERROR(CheckOutputSize(node, out_shape));
  const int64_t slice = Product(data->shape(), b + m, data->shape().size());
  Tensor y(data->dtype(), out_shape);
  for (size_t t = 0; t < offsets.size(); ++t) {
    for (int64_t s = 0; s < slice; ++s) {
      CopyElement(*data, offsets[t] + s, y, static_cast<int64_t>(t) * slice + s);
    }
  }
  return std::vector<Tensor>{std::move(y)};
}

enum class ScatterReduction { kNone, kAdd, kMul, kMax, kMin };

absl::StatusOr<ScatterReduction> ParseReduction(const Node& node) {
  const std::string r = node.GetString("reduction", "none");
  if (r == "none") return ScatterReduction::kNone;
  if (r == "add") return ScatterReduction::kAdd;
  if (r == "mul") return ScatterReduction::kMul;
  if (r == "max") return ScatterReduction::kMax;
  if (r == "min") return ScatterReduction::kMin;
  return Unsupported(node, "unknown reduction '" + r + "'");
}

// Applies updates[src + s] onto y[dst[k] + s] for every k and s < slice, in index order (so
// with reduction "none" the last duplicate wins, like ONNX's reference).
absl::Status ApplyScatter(const Node& node, ScatterReduction red, const std::vector<int64_t>& dst,
                          int64_t slice, const Tensor& updates, Tensor& y) {
  if (red == ScatterReduction::kNone) {
    for (size_t k = 0; k < dst.size(); ++k) {
      for (int64_t s = 0; s < slice; ++s) {
        CopyElement(updates, static_cast<int64_t>(k) * slice + s, y, dst[k] + s);
      }
    }
    return absl::OkStatus();
  }
  return DispatchCompute(node, y.dtype(), [&](auto tag) {
    using C = decltype(tag);
    for (size_t k = 0; k < dst.size(); ++k) {
      for (int64_t s = 0; s < slice; ++s) {
        C u = GetAs<C>(updates, static_cast<int64_t>(k) * slice + s);
        C v = GetAs<C>(y, dst[k] + s);
        switch (red) {
          case ScatterReduction::kAdd:
            v = WrapAdd(v, u);
            break;
          case ScatterReduction::kMul:
            v = WrapMul(v, u);
            break;
          case ScatterReduction::kMax:
            v = u > v ? u : v;
            break;
          case ScatterReduction::kMin:
            v = u < v ? u : v;
            break;
          case ScatterReduction::kNone:
            break;
        }
        SetAs<C>(y, dst[k] + s, v);
      }
    }
  });
}

absl::StatusOr<std::vector<Tensor>> ScatterElementsKernel(const Node& node,
                                                          const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* data, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* indices, RequireInput(node, in, 1));
  ASSIGN_OR_RETURN(const Tensor* updates, RequireInput(node, in, 2));
  RETURN_IF_ERROR(CheckSupportedDType(node, data->dtype()));
  ASSIGN_OR_RETURN(ScatterReduction red, ParseReduction(node));
  if (updates->dtype() != data->dtype() || updates->shape() != indices->shape()) {
    return InvalidInput(node, "updates must match indices' shape and data's dtype");
  }
  if (data->rank() == 0) return InvalidInput(node, "data must have rank >= 1");
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, node.GetInt("axis", 0), data->rank()));
  ASSIGN_OR_RETURN(std::vector<int64_t> dst, ElementOffsets(node, *data, *indices, axis));
  Tensor y = data->Clone();
  RETURN_IF_ERROR(ApplyScatter(node, red, dst, 1, *updates, y));
  return std::vector<Tensor>{std::move(y)};
}

absl::StatusOr<std::vector<Tensor>> ScatterNDKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* data, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* indices, RequireInput(node, in, 1));
  ASSIGN_OR_RETURN(const Tensor* updates, RequireInput(node, in, 2));
  RETURN_IF_ERROR(CheckSupportedDType(node, data->dtype()));
  ASSIGN_OR_RETURN(ScatterReduction red, ParseReduction(node));
  ASSIGN_OR_RETURN(std::vector<int64_t> dst, TupleOffsets(node, *data, *indices, 0));
  const int64_t k = indices->dim(indices->rank() - 1);
  // updates.shape must be indices.shape[:-1] + data.shape[k:].
  std::vector<int64_t> want(indices->shape().begin(), indices->shape().end() - 1);
  want.insert(want.end(), data->shape().begin() + k, data->shape().end());
  if (updates->dtype() != data->dtype() || updates->shape() != want) {
    return InvalidInput(node, "updates must have shape " + ShapeToString(want) +
                                  " and data's dtype, got " + ShapeToString(updates->shape()));
  }
  Tensor y = data->Clone();
  const int64_t slice = Product(data->shape(), k, data->shape().size());
  RETURN_IF_ERROR(ApplyScatter(node, red, dst, slice, *updates, y));
  return std::vector<Tensor>{std::move(y)};
}

}  // namespace

void RegisterGatherScatterKernels(KernelRegistry& r) {
  r.Register(kOnnxDomain, "Gather", GatherKernel);
  r.Register(kOnnxDomain, "GatherElements", GatherElementsKernel);
  r.Register(kOnnxDomain, "GatherND", GatherNDKernel);
  r.Register(kOnnxDomain, "ScatterElements", ScatterElementsKernel);
  r.Register(kOnnxDomain, "ScatterND", ScatterNDKernel);
}

}  // namespace kiln::ref
