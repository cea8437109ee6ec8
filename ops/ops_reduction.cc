// Reference kernels for reductions and search: Reduce*, ArgMax/ArgMin, CumSum, CumProd, TopK.
//
// All of them work on "groups": the input elements that share every coordinate except the
// reduced (or scanned, or searched) axes. GroupsOf lists each group's base offset and the
// offsets inside a group once, so every kernel is a plain loop over groups. Floats accumulate
// in double; integers accumulate exactly, wrapping like the element type.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "ops/reduction_ops.h"

namespace kiln::ref {
namespace {

// Flat input offsets of every coordinate combination over the dims where `select` is true,
// in row-major order (the order of those dims in the output).
std::vector<int64_t> OffsetsOver(const std::vector<int64_t>& shape,
                                 const std::vector<bool>& select) {
  std::vector<int64_t> strides = Strides(shape);
  std::vector<int64_t> out = {0};
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!select[d]) continue;
    std::vector<int64_t> next;
    next.reserve(out.size() * static_cast<size_t>(shape[d]));
    for (int64_t o : out) {
      for (int64_t i = 0; i < shape[d]; ++i) next.push_back(o + i * strides[d]);
    }
    out = std::move(next);
  }
  return out;
}

struct Groups {
  std::vector<int64_t> bases;    // one per group, in row-major order of the kept dims
  std::vector<int64_t> offsets;  // relative to a base, row-major over the reduced dims
};

Groups GroupsOf(const std::vector<int64_t>& shape, const std::vector<bool>& reduced) {
  std::vector<bool> kept(reduced.size());
  for (size_t d = 0; d < reduced.size(); ++d) kept[d] = !reduced[d];
  return Groups{OffsetsOver(shape, kept), OffsetsOver(shape, reduced)};
}

std::vector<int64_t> ReducedShape(const std::vector<int64_t>& shape,
                                  const std::vector<bool>& reduced, bool keepdims) {
  std::vector<int64_t> out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d]) {
      out.push_back(shape[d]);
    } else if (keepdims) {
      out.push_back(1);
    }
  }
  return out;
}

// A mask with just `axis` set. A rank-0 tensor has no axes: its single element is its own
// group (NormalizeAxis accepts axis 0 / -1 there).
std::vector<bool> AxisMask(int64_t rank, int64_t axis) {
  std::vector<bool> mask(static_cast<size_t>(rank), false);
  if (axis < rank) mask[axis] = true;
  return mask;
}

// ---------------------------------------------------------------------------------------------
// Reduce*

enum class ReduceKind { kL1, kL2, kLogSum, kLogSumExp, kMax, kMean, kMin, kProd, kSum, kSumSquare };

// The axes input (newest-opset form). Absent or empty axes reduce everything, unless
// noop_with_empty_axes, in which case nothing is reduced and each output element is its own
// one-element group (so ReduceSumSquare still squares, as the spec says).
absl::StatusOr<std::vector<bool>> ReducedAxes(const Node& node, const KernelInputs& in,
                                              int64_t rank) {
  const Tensor* axes = in.size() > 1 ? in[1] : nullptr;
  if (!axes || axes->numel() == 0) {
    bool noop = node.GetInt("noop_with_empty_axes", 0) != 0;
    return std::vector<bool>(static_cast<size_t>(rank), !noop);
  }
  RETURN_IF_ERROR(CheckIndexDType(node, *axes, "axes"));
  if (axes->rank() > 1) return InvalidInput(node, "axes must be 1-D");
  std::vector<bool> mask(static_cast<size_t>(rank), false);
  for (int64_t a : axes->ToInt64Vector()) {
    ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, a, rank));
    if (axis >= rank) continue;  // rank 0: nothing to reduce
    if (mask[axis]) return InvalidInput(node, "axis " + std::to_string(a) + " repeated");
    mask[axis] = true;
  }
  return mask;
}

double Sum(const std::vector<double>& v, double (*f)(double)) {
  double s = 0.0;
  for (double x : v) s += f(x);
  return s;
}

// Max/Min that propagate NaN, like numpy (and ONNX's reference).
double Extreme(const std::vector<double>& v, bool max) {
  double best = max ? -INFINITY : INFINITY;
  for (double x : v) {
    if (std::isnan(x)) return x;
    best = max ? std::max(best, x) : std::min(best, x);
  }
  return best;
}

double LogSumExp(const std::vector<double>& v) {
  double m = Extreme(v, true);
  // Shift by the max so large inputs do not overflow; an infinite or NaN max is the answer.
  if (!std::isfinite(m)) return m;
  double s = 0.0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

double CombineFloat(ReduceKind kind, const std::vector<double>& v) {
  switch (kind) {
    case ReduceKind::kL1:
      return Sum(v, [](double x) { return std::fabs(x); });
    case ReduceKind::kL2:
      return std::sqrt(Sum(v, [](double x) { return x * x; }));
    case ReduceKind::kLogSum:
      return std::log(Sum(v, [](double x) { return x; }));
    case ReduceKind::kLogSumExp:
      return LogSumExp(v);
    case ReduceKind::kMax:
      return Extreme(v, true);
    case ReduceKind::kMin:
      return Extreme(v, false);
    case ReduceKind::kMean:
      return Sum(v, [](double x) { return x; }) / static_cast<double>(v.size());
    case ReduceKind::kProd: {
      double p = 1.0;
      for (double x : v) p *= x;
      return p;
    }
    case ReduceKind::kSum:
      return Sum(v, [](double x) { return x; });
    case ReduceKind::kSumSquare:
      return Sum(v, [](double x) { return x * x; });
  }
  return 0.0;
}

// Integer reductions: exact (wrapping) sums and products; the transcendental ones go through
// double and truncate, as numpy's astype does in ONNX's reference.
template <class C>
C CombineInt(ReduceKind kind, const std::vector<C>& v) {
  C acc = kind == ReduceKind::kProd ? 1 : 0;
  for (C x : v) {
    switch (kind) {
      case ReduceKind::kL1: {
        C ax = x;
        if constexpr (std::is_signed_v<C>) ax = x < 0 ? WrapMul<C>(x, -1) : x;
        acc = WrapAdd(acc, ax);
        break;
      }
      case ReduceKind::kProd:
        acc = WrapMul(acc, x);
        break;
      case ReduceKind::kSumSquare:
        acc = WrapAdd(acc, WrapMul(x, x));
        break;
      case ReduceKind::kMax:
      case ReduceKind::kMin:
        break;
      default:
        acc = WrapAdd(acc, x);
        break;
    }
  }
  switch (kind) {
    case ReduceKind::kMax:
      return *std::max_element(v.begin(), v.end());
    case ReduceKind::kMin:
      return *std::min_element(v.begin(), v.end());
    case ReduceKind::kMean:
      return v.empty() ? 0 : acc / static_cast<C>(v.size());
    case ReduceKind::kL2:
    case ReduceKind::kLogSum:
    case ReduceKind::kLogSumExp:
      return FromDouble<C>(CombineFloat(kind, std::vector<double>(v.begin(), v.end())));
    default:
      return acc;
  }
}

// The identity of Max/Min over an empty set: the lowest / highest value of the element type
// (-inf / +inf for floats), per ONNX's "empty_set" tests.
void SetExtremeIdentity(const Node& node, Tensor& y, int64_t i, bool lowest) {
  (void)DispatchStorage(node, y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      y.SetInt(i, lowest ? 0 : 1);
    } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
      y.SetUInt(i, lowest ? 0 : std::numeric_limits<T>::max());
    } else if constexpr (std::is_integral_v<T>) {
      y.SetInt(i, lowest ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max());
    } else {
      y.SetDouble(i, lowest ? -INFINITY : INFINITY);
    }
  });
}

absl::Status CheckReduceDType(const Node& node, ReduceKind kind, DType t) {
  RETURN_IF_ERROR(CheckSupportedDType(node, t));
  // Only ReduceMax/ReduceMin accept bool (opset 20); arithmetic on bool is meaningless.
  if (t == DType::kBool && kind != ReduceKind::kMax && kind != ReduceKind::kMin) {
    return Unsupported(node, "dtype BOOL is not supported by this operator");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> ReduceKernel(ReduceKind kind, const Node& node,
                                                 const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckReduceDType(node, kind, x->dtype()));
  ASSIGN_OR_RETURN(std::vector<bool> reduced, ReducedAxes(node, in, x->rank()));
  bool keepdims = node.GetInt("keepdims", 1) != 0;
  Tensor y(x->dtype(), ReducedShape(x->shape(), reduced, keepdims));
  Groups g = GroupsOf(x->shape(), reduced);
  bool empty_extreme = g.offsets.empty() && (kind == ReduceKind::kMax || kind == ReduceKind::kMin);
  RETURN_IF_ERROR(DispatchCompute(node, x->dtype(), [&](auto tag) {
    using C = decltype(tag);
    std::vector<C> vals(g.offsets.size());
    for (size_t o = 0; o < g.bases.size(); ++o) {
      auto i = static_cast<int64_t>(o);
      if (empty_extreme) {
        SetExtremeIdentity(node, y, i, kind == ReduceKind::kMax);
        continue;
      }
      for (size_t j = 0; j < vals.size(); ++j) vals[j] = GetAs<C>(*x, g.bases[o] + g.offsets[j]);
      if constexpr (std::is_same_v<C, double>) {
        SetAs<C>(y, i, CombineFloat(kind, vals));
      } else {
        SetAs<C>(y, i, CombineInt<C>(kind, vals));
      }
    }
  }));
  return std::vector<Tensor>{std::move(y)};
}

KernelFn Reduce(ReduceKind kind) {
  return [kind](const Node& node, const KernelInputs& in) { return ReduceKernel(kind, node, in); };
}

// ---------------------------------------------------------------------------------------------
// ArgMax / ArgMin, TopK: orderings. NaN counts as larger than every number, so sorting has a
// strict weak order and argmax finds NaN the way numpy does.

template <class C>
bool Greater(C a, C b) {
  if constexpr (std::is_same_v<C, double>) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && !std::isnan(b);
  }
  return a > b;
}

absl::Status CheckNumeric(const Node& node, DType t) {
  RETURN_IF_ERROR(CheckSupportedDType(node, t));
  if (t == DType::kBool) return Unsupported(node, "dtype BOOL is not supported by this operator");
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> ArgKernel(bool is_max, const Node& node,
                                              const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckNumeric(node, x->dtype()));
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, node.GetInt("axis", 0), x->rank()));
  bool keepdims = node.GetInt("keepdims", 1) != 0;
  bool last = node.GetInt("select_last_index", 0) != 0;
  std::vector<bool> mask = AxisMask(x->rank(), axis);
  Groups g = GroupsOf(x->shape(), mask);
  if (g.offsets.empty() && !g.bases.empty()) {
    return InvalidInput(node, "cannot take the arg-extreme of an empty axis");
  }
  Tensor y(DType::kInt64, ReducedShape(x->shape(), mask, keepdims));
  RETURN_IF_ERROR(DispatchCompute(node, x->dtype(), [&](auto tag) {
    using C = decltype(tag);
    for (size_t o = 0; o < g.bases.size(); ++o) {
      int64_t best = 0;
      C best_v = GetAs<C>(*x, g.bases[o]);
      for (size_t j = 1; j < g.offsets.size(); ++j) {
        C v = GetAs<C>(*x, g.bases[o] + g.offsets[j]);
        bool better = is_max ? Greater(v, best_v) : Greater(best_v, v);
        bool tie = !Greater(v, best_v) && !Greater(best_v, v);
        if (better || (tie && last)) {
          best = static_cast<int64_t>(j);
          best_v = v;
        }
      }
      y.SetInt(static_cast<int64_t>(o), best);
    }
  }));
  return std::vector<Tensor>{std::move(y)};
}

absl::StatusOr<std::vector<Tensor>> TopKKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* kt, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckNumeric(node, x->dtype()));
  if (x->rank() == 0) return InvalidInput(node, "input must have rank >= 1");
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, node.GetInt("axis", -1), x->rank()));
  ASSIGN_OR_RETURN(int64_t k, ScalarInt(node, *kt, "K"));
  if (k < 0 || k > x->dim(axis)) {
    return InvalidInput(node, "K=" + std::to_string(k) + " out of range for axis of size " +
                                  std::to_string(x->dim(axis)));
  }
  bool largest = node.GetInt("largest", 1) != 0;
  std::vector<int64_t> out_shape = x->shape();
  out_shape[axis] = k;
  Tensor values(x->dtype(), out_shape), indices(DType::kInt64, out_shape);
  std::vector<bool> mask = AxisMask(x->rank(), axis);
  Groups src = GroupsOf(x->shape(), mask), dst = GroupsOf(out_shape, mask);
  RETURN_IF_ERROR(DispatchCompute(node, x->dtype(), [&](auto tag) {
    using C = decltype(tag);
    std::vector<int64_t> order(src.offsets.size());
    for (size_t o = 0; o < src.bases.size(); ++o) {
      auto at = [&](int64_t j) { return GetAs<C>(*x, src.bases[o] + src.offsets[j]); };
      std::iota(order.begin(), order.end(), 0);
      // Stable, so equal values keep ascending index order (ONNX: lower index first). The
      // output is always sorted, which also satisfies sorted=0.
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return largest ? Greater(at(a), at(b)) : Greater(at(b), at(a));
      });
      for (int64_t j = 0; j < k; ++j) {
        int64_t out = dst.bases[o] + dst.offsets[j];
        CopyElement(*x, src.bases[o] + src.offsets[order[j]], values, out);
        indices.SetInt(out, order[j]);
      }
    }
  }));
  return std::vector<Tensor>{std::move(values), std::move(indices)};
}

// CumSum (product = false) and CumProd: the running sum or product along one axis.
absl::StatusOr<std::vector<Tensor>> CumKernel(const Node& node, const KernelInputs& in,
                                              bool product) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* axis_t, RequireInput(node, in, 1));
  RETURN_IF_ERROR(CheckNumeric(node, x->dtype()));
  ASSIGN_OR_RETURN(int64_t a, ScalarInt(node, *axis_t, "axis"));
  ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(node, a, x->rank()));
  bool exclusive = node.GetInt("exclusive", 0) != 0;
  bool reverse = node.GetInt("reverse", 0) != 0;
  Tensor y(x->dtype(), x->shape());
  Groups g = GroupsOf(x->shape(), AxisMask(x->rank(), axis));
  RETURN_IF_ERROR(DispatchCompute(node, x->dtype(), [&](auto tag) {
    using C = decltype(tag);
    const auto n = static_cast<int64_t>(g.offsets.size());
    for (int64_t base : g.bases) {
      C acc = product ? 1 : 0;
      auto fold = [product](C a, C v) { return product ? WrapMul(a, v) : WrapAdd(a, v); };
      for (int64_t step = 0; step < n; ++step) {
        int64_t i = base + g.offsets[reverse ? n - 1 - step : step];
        C v = GetAs<C>(*x, i);
        if (!exclusive) acc = fold(acc, v);
        SetAs<C>(y, i, acc);
        if (exclusive) acc = fold(acc, v);
      }
    }
  }));
  return std::vector<Tensor>{std::move(y)};
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Helpers shared with ops_gather.cc and ops_generate.cc (declared in reduction_ops.h).

absl::Status CheckIndexDType(const Node& node, const Tensor& t, const char* what) {
  if (t.dtype() == DType::kInt32 || t.dtype() == DType::kInt64) return absl::OkStatus();
  return Unsupported(node,
                     std::string(what) + " must be INT32 or INT64, got " + DTypeName(t.dtype()));
}

absl::StatusOr<int64_t> NormalizeIndex(const Node& node, int64_t index, int64_t dim) {
  if (index < -dim || index >= dim) {
    return InvalidInput(node, "index " + std::to_string(index) +
                                  " out of range for a dimension of size " + std::to_string(dim));
  }
  return index < 0 ? index + dim : index;
}

absl::StatusOr<int64_t> ScalarInt(const Node& node, const Tensor& t, const char* what) {
  RETURN_IF_ERROR(CheckIndexDType(node, t, what));
  if (t.numel() != 1 || t.rank() > 1) {
    return InvalidInput(
        node, std::string(what) + " must be a scalar, got shape " + ShapeToString(t.shape()));
  }
  return t.GetInt(0);
}

absl::Status CheckOutputSize(const Node& node, const std::vector<int64_t>& shape) {
  // 2^31 elements is far beyond any real tensor and still allocatable; past it a model is
  // asking for a crash, not a computation.
  constexpr int64_t kMaxElements = int64_t{1} << 31;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return InvalidInput(node, "negative output dimension " + std::to_string(d));
    if (d != 0 && n > kMaxElements / d) {
      return InvalidInput(node, "output shape " + ShapeToString(shape) + " is too large");
    }
    n *= d;
  }
  return absl::OkStatus();
}

void RegisterReductionKernels(KernelRegistry& r) {
  const std::pair<const char*, ReduceKind> reduces[] = {
      {"ReduceL1", ReduceKind::kL1},         {"ReduceL2", ReduceKind::kL2},
      {"ReduceLogSum", ReduceKind::kLogSum}, {"ReduceLogSumExp", ReduceKind::kLogSumExp},
      {"ReduceMax", ReduceKind::kMax},       {"ReduceMean", ReduceKind::kMean},
      {"ReduceMin", ReduceKind::kMin},       {"ReduceProd", ReduceKind::kProd},
      {"ReduceSum", ReduceKind::kSum},       {"ReduceSumSquare", ReduceKind::kSumSquare},
  };
  for (const auto& [op, kind] : reduces) r.Register(kOnnxDomain, op, Reduce(kind));
  r.Register(kOnnxDomain, "ArgMax",
             [](const Node& n, const KernelInputs& in) { return ArgKernel(true, n, in); });
  r.Register(kOnnxDomain, "ArgMin",
             [](const Node& n, const KernelInputs& in) { return ArgKernel(false, n, in); });
  r.Register(kOnnxDomain, "TopK", TopKKernel);
  r.Register(kOnnxDomain, "CumSum",
             [](const Node& n, const KernelInputs& in) { return CumKernel(n, in, false); });
  r.Register(kOnnxDomain, "CumProd",
             [](const Node& n, const KernelInputs& in) { return CumKernel(n, in, true); });
  RegisterGatherScatterKernels(r);
  RegisterGeneratorKernels(r);
}

}  // namespace kiln::ref
