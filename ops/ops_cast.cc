// Reference kernels for Cast and CastLike between the supported dtypes.
//
// Conversion rules (numpy's astype where it is defined):
//  - float -> float: through double, rounded to nearest even (halves keep NaN/inf).
//  - integer/bool -> integer: two's-complement wraparound, like numpy.
//  - float -> integer: truncation toward zero. Out-of-range values (undefined behaviour in
//    C++, platform-dependent in numpy/ONNX Runtime, and not covered by the ONNX tests)
//    saturate to the target's range, and NaN becomes 0, so the oracle is deterministic.
//  - anything -> bool: nonzero (and NaN) is true.
//  - -> float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ): round to nearest even; the `saturate`
//    attribute (default 1) clamps overflow and infinities to the largest finite value,
//    otherwise they become inf (E5M2) or NaN. -> float4e2m1 always saturates.
//  - -> float8e8m0: a power of two picked by `round_mode` (up (default), down, nearest).
//  - -> int4/uint4/int2/uint2: like the other integers (float truncated), then wrapped
//    modulo 2^bits, which is what ONNX's test data expects (-9 -> int4 7).
// string and element types newer than Kiln knows are UNIMPLEMENTED.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/tensor_ops.h"

namespace kiln::ref {
namespace {

using Outs = absl::StatusOr<std::vector<Tensor>>;

// The inclusive range of an integer dtype, as doubles (exact powers of two at the ends
// that matter: values at or beyond them saturate).
void IntRange(DType t, double& lo, double& hi) {
  switch (t) {
    case DType::kInt8:
      lo = -128.0;
      hi = 127.0;
      return;
    case DType::kInt16:
      lo = -32768.0;
      hi = 32767.0;
      return;
    case DType::kInt32:
      lo = -2147483648.0;
      hi = 2147483647.0;
      return;
    case DType::kUInt8:
      lo = 0.0;
      hi = 255.0;
      return;
    case DType::kUInt16:
      lo = 0.0;
      hi = 65535.0;
      return;
    case DType::kUInt32:
      lo = 0.0;
      hi = 4294967295.0;
      return;
    case DType::kUInt64:
      lo = 0.0;
      hi = 18446744073709551616.0;
      return;  // 2^64, exclusive
    default:
      lo = -9223372036854775808.0;
      hi = 9223372036854775808.0;
      return;  // int64
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
    y.SetUInt(i, tr <= 0    ? 0
                 : tr >= hi ? std::numeric_limits<uint64_t>::max()
                            : static_cast<uint64_t>(tr));
  } else if (t == DType::kInt64) {
    y.SetInt(i, tr <= lo   ? std::numeric_limits<int64_t>::min()
                : tr >= hi ? std::numeric_limits<int64_t>::max()
                           : static_cast<int64_t>(tr));
  } else {
    y.SetInt(i, static_cast<int64_t>(std::clamp(tr, lo, hi)));
  }
}

namespace {

// Cast's attributes that matter for the narrow float targets.
struct CastOptions {
  bool saturate = true;
  E8M0Rounding round_mode = E8M0Rounding::kUp;
};

// Floats of any width, the narrow ones included: the source types read through GetDouble.
bool IsAnyFloat(DType t) { return IsFloatDType(t) || IsNarrowFloatDType(t); }

// Float -> int64 for the narrow integer targets, which then wrap: NaN is 0, and values past
// +-2^62 are clamped there (a multiple of 2^bits, so they wrap to 0 rather than being UB).
int64_t TruncForWrap(double v) {
  if (std::isnan(v)) return 0;
  constexpr double kLimit = 4611686018427387904.0;  // 2^62
  return static_cast<int64_t>(std::clamp(std::trunc(v), -kLimit, kLimit));
}

double SourceValue(const Tensor& x, int64_t i) {
  if (x.dtype() == DType::kUInt64) return static_cast<double>(x.GetUInt(i));
  return x.GetDouble(i);  // exact for every integer up to 2^53
}

void CastElement(const Tensor& x, int64_t i, Tensor& y, const CastOptions& opt) {
  const DType from = x.dtype(), to = y.dtype();
  if (to == DType::kFloat8E8M0) {
    y.mutable_data<uint8_t>()[i] = DoubleToE8M0(SourceValue(x, i), opt.saturate, opt.round_mode);
  } else if (IsNarrowFloatDType(to)) {
    y.mutable_data<uint8_t>()[i] = DoubleToFloat8(to, SourceValue(x, i), opt.saturate);
  } else if (IsAnyFloat(to)) {
    if (from == DType::kUInt64) {
      y.SetDouble(i, static_cast<double>(x.GetUInt(i)));
    } else {
      y.SetDouble(i, x.GetDouble(i));  // exact for every integer up to 2^53
    }
  } else if (to == DType::kBool) {
    y.SetInt(i, IsAnyFloat(from) ? x.GetDouble(i) != 0.0 : x.GetUInt(i) != 0);
  } else if (IsAnyFloat(from) && IsNarrowDType(to)) {
    y.SetInt(i, TruncForWrap(x.GetDouble(i)));  // SetInt wraps to the type's width
  } else if (IsAnyFloat(from)) {
    StoreFloatAsInt(x.GetDouble(i), y, i);
  } else {
    y.SetUInt(i, x.GetUInt(i));  // wraps modulo 2^bits like a C++ integer conversion
  }
}

// Cast handles the narrow types itself, so it checks IsSupportedDType rather than
// CheckSupportedDType (which turns them away from arithmetic kernels).
absl::Status CheckCastable(const Node& node, DType t) {
  if (IsSupportedDType(t)) return absl::OkStatus();
  return Unsupported(node, "dtype " + DTypeName(t) + " is not supported");
}

absl::StatusOr<CastOptions> ReadCastOptions(const Node& node) {
  CastOptions opt;
  opt.saturate = node.GetInt("saturate", 1) != 0;
  const std::string mode = node.GetString("round_mode", "up");
  if (mode == "up") {
    opt.round_mode = E8M0Rounding::kUp;
  } else if (mode == "down") {
    opt.round_mode = E8M0Rounding::kDown;
  } else if (mode == "nearest") {
    opt.round_mode = E8M0Rounding::kNearest;
  } else {
    return InvalidInput(node, "unknown round_mode '" + mode + "'");
  }
  return opt;
}

absl::StatusOr<Tensor> CastTensor(const Node& node, const Tensor& x, DType to) {
  RETURN_IF_ERROR(CheckCastable(node, x.dtype()));
  RETURN_IF_ERROR(CheckCastable(node, to));
  ASSIGN_OR_RETURN(const CastOptions opt, ReadCastOptions(node));
  if (x.dtype() == to) return x;
  Tensor y(to, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) CastElement(x, i, y, opt);
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
