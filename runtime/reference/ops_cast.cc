// Reference kernels for Cast and CastLike between the supported dtypes.
//
// Conversion rules (numpy's astype where it is defined):
//  - float -> float: through double, rounded to nearest even (halves keep NaN/inf).
//  - integer/bool -> integer: two's-complement wraparound, like numpy.
//  - float -> integer: truncation toward zero. Out-of-range values (undefined behaviour in
//    C++, platform-dependent in numpy/ONNX Runtime, and not covered by the ONNX tests)
//    saturate to the target's range, and NaN becomes 0, so the oracle is deterministic.
//  - anything -> bool: nonzero (and NaN) is true.
// string, float8, int4 and other types Kiln cannot hold are UNIMPLEMENTED.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/reference/tensor_ops.h"

namespace kiln::ref {
namespace {

using Outs = absl::StatusOr<std::vector<Tensor>>;

// The inclusive range of an integer dtype, as doubles (exact powers of two at the ends
// that matter: values at or beyond them saturate).
void IntRange(DType t, double& lo, double& hi) {
  switch (t) {
    case DType::kInt8: lo = -128.0; hi = 127.0; return;
    case DType::kInt16: lo = -32768.0; hi = 32767.0; return;
    case DType::kInt32: lo = -2147483648.0; hi = 2147483647.0; return;
    case DType::kUInt8: lo = 0.0; hi = 255.0; return;
    case DType::kUInt16: lo = 0.0; hi = 65535.0; return;
    case DType::kUInt32: lo = 0.0; hi = 4294967295.0; return;
    case DType::kUInt64: lo = 0.0; hi = 18446744073709551616.0; return;  // 2^64, exclusive
    default: lo = -9223372036854775808.0; hi = 9223372036854775808.0; return;  // int64
  }
}

}  // namespace

void StoreFloatAsInt(double v, Tensor& y, int64_t i) {
  const DType t = y.dtype();
  if (std::isnan(v)) {
    y.SetInt(i, 0);
    return;
  }
  double lo, hi;
  IntRange(t, lo, hi);
  const double tr = std::trunc(v);
  if (t == DType::kUInt64) {
    y.SetUInt(i, tr <= 0 ? 0 : tr >= hi ? std::numeric_limits<uint64_t>::max()
                                        : static_cast<uint64_t>(tr));
  } else if (t == DType::kInt64) {
    y.SetInt(i, tr <= lo ? std::numeric_limits<int64_t>::min()
                : tr >= hi ? std::numeric_limits<int64_t>::max()
                           : static_cast<int64_t>(tr));
  } else {
    y.SetInt(i, static_cast<int64_t>(std::clamp(tr, lo, hi)));
  }
}

namespace {

void CastElement(const Tensor& x, int64_t i, Tensor& y) {
  const DType from = x.dtype(), to = y.dtype();
  if (IsFloatDType(to)) {
    if (from == DType::kUInt64) {
      y.SetDouble(i, static_cast<double>(x.GetUInt(i)));
    } else {
      y.SetDouble(i, x.GetDouble(i));  // exact for every integer up to 2^53
    }
  } else if (to == DType::kBool) {
    y.SetInt(i, IsFloatDType(from) ? x.GetDouble(i) != 0.0 : x.GetUInt(i) != 0);
  } else if (IsFloatDType(from)) {
    StoreFloatAsInt(x.GetDouble(i), y, i);
  } else {
    y.SetUInt(i, x.GetUInt(i));  // wraps modulo 2^bits like a C++ integer conversion
  }
}

absl::StatusOr<Tensor> CastTensor(const Node& node, const Tensor& x, DType to) {
  RETURN_IF_ERROR(CheckSupportedDType(node, x.dtype()));
  RETURN_IF_ERROR(CheckSupportedDType(node, to));
  if (x.dtype() == to) return x;
  Tensor y(to, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) CastElement(x, i, y);
  return y;
}

Outs CastKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  if (!node.HasAttr("to")) return InvalidInput(node, "missing attribute 'to'");
  const int64_t to = node.GetInt("to", 0);
  // Unknown positive numbers are types newer ONNX versions added: unsupported, not invalid.
  if (to <= 0 || to > std::numeric_limits<int32_t>::max()) {
    return InvalidInput(node, "'to' is not a valid ONNX dtype: " + std::to_string(to));
  }
  ASSIGN_OR_RETURN(Tensor y, CastTensor(node, *x, static_cast<DType>(to)));
  return std::vector<Tensor>{y};
}

Outs CastLikeKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* like, RequireInput(node, in, 1));
  ASSIGN_OR_RETURN(Tensor y, CastTensor(node, *x, like->dtype()));
  return std::vector<Tensor>{y};
}

}  // namespace

void RegisterCastKernels(KernelRegistry& r) {
  r.Register("", "Cast", CastKernel);
  r.Register("", "CastLike", CastLikeKernel);
}

}  // namespace kiln::ref
