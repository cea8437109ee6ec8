// Reference kernels that generate or mask tensors: OneHot, Trilu, EyeLike, Range.
#include <cmath>
#include <string>

#include "ops/range.h"
#include "ops/reduction_ops.h"

namespace kiln::ref {
namespace {

// OneHot indices may be any numeric type; floats truncate toward zero. Values that are not
// finite integers are "out of range" and select no position.
bool OneHotIndex(const Tensor& t, int64_t i, int64_t depth, int64_t* out) {
  int64_t v = 0;
  if (IsFloatDType(t.dtype())) {
    double d = std::trunc(t.GetDouble(i));
    if (!(std::fabs(d) <= static_cast<double>(depth))) return false;
    v = static_cast<int64_t>(d);
  } else if (t.dtype() == DType::kUInt64 && t.GetUInt(i) > static_cast<uint64_t>(depth)) {
    return false;
  } else {
    v = t.GetInt(i);
  }
  if (v < -depth || v >= depth) return false;
  *out = v < 0 ? v + depth : v;
  return true;
}

absl::StatusOr<int64_t> OneHotDepth(const Node& node, const Tensor& t) {
  RETURN_IF_ERROR(CheckSupportedDType(node, t.dtype()));
  if (t.numel() != 1 || t.rank() > 1) return InvalidInput(node, "depth must be a scalar");
  double d = t.GetDouble(0);
  if (!(d >= 1.0) || d > 2147483648.0) {
    return InvalidInput(node, "depth must be a positive integer, got " + std::to_string(d));
  }
  return static_cast<int64_t>(d);
}

absl::StatusOr<std::vector<Tensor>> OneHotKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* indices, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* depth_t, RequireInput(node, in, 1));
  ASSIGN_OR_RETURN(const Tensor* values, RequireInput(node, in, 2));
  RETURN_IF_ERROR(CheckSupportedDType(node, indices->dtype()));
  RETURN_IF_ERROR(CheckSupportedDType(node, values->dtype()));
  if (values->numel() != 2) return InvalidInput(node, "values must hold [off, on]");
  ASSIGN_OR_RETURN(int64_t depth, OneHotDepth(node, *depth_t));
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, node.GetInt("axis", -1), indices->rank() + 1));
  std::vector<int64_t> out_shape = indices->shape();
  out_shape.insert(out_shape.begin() + axis, depth);
  RETURN_IF_ERROR(CheckOutputSize(node, out_shape));
  Tensor y(values->dtype(), out_shape);
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= indices->dim(d);
  const int64_t inner = outer == 0 ? 0 : indices->numel() / outer;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      int64_t hot = -1;  // stays -1 for an out-of-range index: every position is "off"
      OneHotIndex(*indices, o * inner + i, depth, &hot);
      for (int64_t d = 0; d < depth; ++d) {
        CopyElement(*values, d == hot ? 1 : 0, y, (o * depth + d) * inner + i);
      }
    }
  }
  return std::vector<Tensor>{std::move(y)};
}

absl::StatusOr<std::vector<Tensor>> TriluKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckSupportedDType(node, x->dtype()));
  if (x->rank() < 2) return InvalidInput(node, "input must have rank >= 2");
  int64_t k = 0;
  if (in.size() > 1 && in[1]) {
    ASSIGN_OR_RETURN(k, ScalarInt(node, *in[1], "k"));
  }
  const bool upper = node.GetInt("upper", 1) != 0;
  const int64_t rows = x->dim(x->rank() - 2), cols = x->dim(x->rank() - 1);
  Tensor y(x->dtype(), x->shape());  // zero-filled: the masked-out part
  for (int64_t i = 0; i < x->numel(); ++i) {
    const int64_t c = i % cols, r = (i / cols) % rows;
    // c - r is small, so comparing it with any k cannot overflow.
    if (upper ? c - r >= k : c - r <= k) CopyElement(*x, i, y, i);
  }
  return std::vector<Tensor>{std::move(y)};
}

absl::StatusOr<std::vector<Tensor>> EyeLikeKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckSupportedDType(node, x->dtype()));
  if (x->rank() != 2) return InvalidInput(node, "input must be 2-D");
  int64_t dt = node.GetInt("dtype", static_cast<int64_t>(x->dtype()));
  if (!IsValidOnnxDType(static_cast<int32_t>(dt))) {
    return InvalidInput(node, "invalid dtype " + std::to_string(dt));
  }
  const auto dtype = static_cast<DType>(dt);
  RETURN_IF_ERROR(CheckSupportedDType(node, dtype));
  const int64_t k = node.GetInt("k", 0), rows = x->dim(0), cols = x->dim(1);
  Tensor y(dtype, x->shape());
  for (int64_t r = 0; r < rows; ++r) {
    // Written as c - r == k over columns so a huge k cannot overflow r + k.
    if (k >= cols - r || k < -r) continue;
    y.SetDouble(r * cols + r + k, 1.0);
  }
  return std::vector<Tensor>{std::move(y)};
}

absl::StatusOr<std::vector<Tensor>> RangeKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* start, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* limit, RequireInput(node, in, 1));
  ASSIGN_OR_RETURN(const Tensor* delta, RequireInput(node, in, 2));
  ASSIGN_OR_RETURN(int64_t n, RangeLength(node, *start, *limit, *delta));
  Tensor y(start->dtype(), {n});
  if (IsFloatDType(start->dtype())) {
    const double s = start->GetDouble(0), d = delta->GetDouble(0);
    for (int64_t i = 0; i < n; ++i) y.SetDouble(i, s + static_cast<double>(i) * d);
  } else {
    // Every value lies between start and limit, so the wrapping arithmetic never wraps.
    const int64_t s = start->GetInt(0), d = delta->GetInt(0);
    for (int64_t i = 0; i < n; ++i) y.SetInt(i, WrapAdd(s, WrapMul(i, d)));
  }
  return std::vector<Tensor>{std::move(y)};
}

// Exact ceil((limit - start) / delta) for integers, clamped at 0, with no overflow for any
// int64 operands (the distance is taken in uint64).
int64_t IntRangeLength(int64_t s, int64_t l, int64_t d) {
  if (d > 0 && l > s) {
    return static_cast<int64_t>(
        (static_cast<uint64_t>(l) - static_cast<uint64_t>(s) - 1) / static_cast<uint64_t>(d) + 1);
  }
  if (d < 0 && l < s) {
    uint64_t step = uint64_t{0} - static_cast<uint64_t>(d);
    return static_cast<int64_t>((static_cast<uint64_t>(s) - static_cast<uint64_t>(l) - 1) / step +
                                1);
  }
  return 0;
}

}  // namespace

absl::StatusOr<int64_t> RangeLength(const Node& node, const Tensor& start, const Tensor& limit,
                                    const Tensor& delta) {
  for (const Tensor* t : {&start, &limit, &delta}) {
    if (t->dtype() != start.dtype()) {
      return InvalidInput(node, "start, limit and delta must have one dtype");
    }
    if (t->numel() != 1 || t->rank() > 1) {
      return InvalidInput(node, "start, limit and delta must be scalars");
    }
  }
  RETURN_IF_ERROR(CheckSupportedDType(node, start.dtype()));
  constexpr int64_t kMaxLength = int64_t{1} << 31;  // as CheckOutputSize
  if (IsFloatDType(start.dtype())) {
    const double s = start.GetDouble(0), l = limit.GetDouble(0), d = delta.GetDouble(0);
    if (d == 0.0) return InvalidInput(node, "delta must not be zero");
    const double n = std::ceil((l - s) / d);
    if (std::isnan(n) || n > static_cast<double>(kMaxLength)) {
      return InvalidInput(node, "Range length " + std::to_string(n) + " is not valid");
    }
    return n > 0 ? static_cast<int64_t>(n) : 0;
  }
  if (!IsIntegerDType(start.dtype()) || !IsSignedDType(start.dtype())) {
    return Unsupported(node, "dtype " + DTypeName(start.dtype()) + " is not supported by Range");
  }
  const int64_t d = delta.GetInt(0);
  if (d == 0) return InvalidInput(node, "delta must not be zero");
  const int64_t n = IntRangeLength(start.GetInt(0), limit.GetInt(0), d);
  if (n > kMaxLength || n < 0) {
    return InvalidInput(node, "Range length " + std::to_string(n) + " is too large");
  }
  return n;
}

void RegisterGeneratorKernels(KernelRegistry& r) {
  r.Register(kOnnxDomain, "OneHot", OneHotKernel);
  r.Register(kOnnxDomain, "Trilu", TriluKernel);
  r.Register(kOnnxDomain, "EyeLike", EyeLikeKernel);
  r.Register(kOnnxDomain, "Range", RangeKernel);
}

}  // namespace kiln::ref
