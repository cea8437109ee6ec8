// Operators whose output shape depends on the input values: Compress (the slices a boolean
// condition keeps), NonZero (coordinates of the nonzero elements, row-major), and Unique
// (distinct elements or slices, with first indices, inverse indices and counts; sorted
// ascending or in order of first occurrence). Data movement copies bytes, so every supported
// dtype is exact.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/tensor_ops.h"

namespace kiln::ref {
namespace {

// x viewed as (outer, len, inner) around `axis`.
struct AxisView {
  int64_t outer = 1, len = 1, inner = 1;
};

AxisView ViewAt(const std::vector<int64_t>& shape, int64_t axis) {
  AxisView v;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    (d < axis ? v.outer : d == axis ? v.len : v.inner) *= shape[d];
  }
  return v;
}

// The slices `keep` (indices along axis) of x, in that order.
Tensor TakeSlices(const Tensor& x, int64_t axis, const std::vector<int64_t>& keep) {
  const AxisView v = ViewAt(x.shape(), axis);
  std::vector<int64_t> shape = x.shape();
  shape[axis] = static_cast<int64_t>(keep.size());
  Tensor y(x.dtype(), shape);
  int64_t o = 0;
  for (int64_t i = 0; i < v.outer; ++i) {
    for (int64_t k : keep) {
      for (int64_t j = 0; j < v.inner; ++j) CopyElement(x, (i * v.len + k) * v.inner + j, y, o++);
    }
  }
  return y;
}

absl::StatusOr<std::vector<Tensor>> Compress(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* cond, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  if (cond->dtype() != DType::kBool || cond->rank() != 1) {
    return InvalidInput(node, "condition must be a 1-D bool tensor");
  }
  const bool has_axis = node.HasAttr("axis");
  if (has_axis && x->rank() == 0) return InvalidInput(node, "axis given for a scalar");
  const Tensor flat = has_axis ? *x : x->Reshaped({x->numel()});
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, node.GetInt("axis", 0), flat.rank()));
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < cond->numel(); ++i) {
    if (!cond->data<bool>()[i]) continue;
    if (i >= flat.dim(axis)) return InvalidInput(node, "condition selects past the axis end");
    keep.push_back(i);
  }
  return std::vector<Tensor>{TakeSlices(flat, axis, keep)};
}

absl::StatusOr<std::vector<Tensor>> NonZero(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  const std::vector<int64_t> shape = x->rank() == 0 ? std::vector<int64_t>{1} : x->shape();
  std::vector<int64_t> hits;
  for (int64_t i = 0; i < x->numel(); ++i) {
    if (x->GetDouble(i) != 0.0 || (IsIntegerDType(x->dtype()) && x->GetUInt(i) != 0)) {
      hits.push_back(i);
    }
  }
  const int64_t rank = static_cast<int64_t>(shape.size()), n = static_cast<int64_t>(hits.size());
  const std::vector<int64_t> strides = Strides(shape);
  Tensor y(DType::kInt64, {rank, n});
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t d = 0; d < rank; ++d) {
      y.mutable_data<int64_t>()[d * n + k] = hits[k] / strides[d] % shape[d];
    }
  }
  return std::vector<Tensor>{std::move(y)};
}

// Compares elements a and b of x: ints exactly, floats as doubles with NaN after everything
// (and equal to itself), as numpy's unique orders them.
int CompareElements(const Tensor& x, int64_t a, int64_t b) {
  if (IsIntegerDType(x.dtype()) || x.dtype() == DType::kBool) {
    if (x.dtype() == DType::kUInt64) {
      const uint64_t u = x.GetUInt(a), v = x.GetUInt(b);
      return u < v ? -1 : u > v ? 1 : 0;
    }
    const int64_t u = x.GetInt(a), v = x.GetInt(b);
    return u < v ? -1 : u > v ? 1 : 0;
  }
  const double u = x.GetDouble(a), v = x.GetDouble(b);
  if (std::isnan(u) || std::isnan(v)) return std::isnan(u) - std::isnan(v);
  return u < v ? -1 : u > v ? 1 : 0;
}

// Lexicographic comparison of slices a and b along the axis of view v.
int CompareSlices(const Tensor& x, const AxisView& v, int64_t a, int64_t b) {
  for (int64_t i = 0; i < v.outer; ++i) {
    for (int64_t j = 0; j < v.inner; ++j) {
      const int c =
          CompareElements(x, (i * v.len + a) * v.inner + j, (i * v.len + b) * v.inner + j);
      if (c != 0) return c;
    }
  }
  return 0;
}

struct UniqueGroups {
  std::vector<int64_t> first;    // per unique slice: its first index, in output order
  std::vector<int64_t> counts;   // per unique slice
  std::vector<int64_t> inverse;  // per input slice: its unique slice's output position
};

UniqueGroups GroupSlices(const Tensor& x, const AxisView& v, bool sorted) {
  std::vector<int64_t> order(v.len);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return CompareSlices(x, v, a, b) < 0; });
  std::vector<std::vector<int64_t>> groups;  // members in ascending value order of groups
  for (size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || CompareSlices(x, v, order[i - 1], order[i]) != 0) groups.emplace_back();
    groups.back().push_back(order[i]);
  }
  if (!sorted) {
    std::sort(groups.begin(), groups.end(),
              [](const auto& a, const auto& b) { return a[0] < b[0]; });
  }
  UniqueGroups g;
  g.inverse.resize(v.len);
  for (size_t k = 0; k < groups.size(); ++k) {
    g.first.push_back(groups[k][0]);
    g.counts.push_back(static_cast<int64_t>(groups[k].size()));
    for (int64_t m : groups[k]) g.inverse[m] = static_cast<int64_t>(k);
  }
  return g;
}

absl::StatusOr<std::vector<Tensor>> Unique(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckMovableDType(node, *x));
  const bool has_axis = node.HasAttr("axis");
  if (has_axis && x->rank() == 0) return InvalidInput(node, "axis given for a scalar");
  const Tensor data = has_axis ? *x : x->Reshaped({x->numel()});
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, node.GetInt("axis", 0), data.rank()));
  const UniqueGroups g =
      GroupSlices(data, ViewAt(data.shape(), axis), node.GetInt("sorted", 1) != 0);
  const auto n = static_cast<int64_t>(g.first.size());
  return std::vector<Tensor>{TakeSlices(data, axis, g.first), Tensor::FromInt64(g.first, {n}),
                             Tensor::FromInt64(g.inverse, {static_cast<int64_t>(g.inverse.size())}),
                             Tensor::FromInt64(g.counts, {n})};
}

}  // namespace

void RegisterSelectKernels(KernelRegistry& r) {
  r.Register(kOnnxDomain, "Compress", Compress);
  r.Register(kOnnxDomain, "NonZero", NonZero);
  r.Register(kOnnxDomain, "Unique", Unique);
}

}  // namespace kiln::ref
