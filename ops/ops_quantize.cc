// QuantizeLinear, DequantizeLinear (opsets 10 to 25: per tensor, per axis, blocked; 8/16-bit
// integers, int4/uint4/int2/uint2, float8 and float4e2m1) and DynamicQuantizeLinear, plus the
// helpers of quantize_util.h.
//
//   Quantize:   y = saturate(round_half_even(x / scale) + zero_point)   (integer targets)
//               y = cast(x / scale + zero_point)                        (float8/float4)
//   Dequantize: y = (x - zero_point) * scale
//
// The division x / scale is rounded to the precision of the scale's dtype (or of the
// `precision` attribute) before it is rounded to an integer, as ONNX specifies; everything
// else is computed in double. The quantized type is the zero point's, else output_dtype,
// else uint8.
#include <cmath>
#include <limits>

#include "ops/nn_ops.h"
#include "ops/quantize_util.h"

namespace kiln::ref {
namespace quant {

bool IntegerRange(DType t, double& lo, double& hi) {
  switch (t) {
    case DType::kInt8:
      lo = -128;
      hi = 127;
      return true;
    case DType::kUInt8:
      lo = 0;
      hi = 255;
      return true;
    case DType::kInt16:
      lo = -32768;
      hi = 32767;
      return true;
    case DType::kUInt16:
      lo = 0;
      hi = 65535;
      return true;
    case DType::kInt32:
      lo = -2147483648.0;
      hi = 2147483647.0;
      return true;
    case DType::kInt4:
      lo = -8;
      hi = 7;
      return true;
    case DType::kUInt4:
      lo = 0;
      hi = 15;
      return true;
    case DType::kInt2:
      lo = -2;
      hi = 1;
      return true;
    case DType::kUInt2:
      lo = 0;
      hi = 3;
      return true;
    default:
      return false;
  }
}

int64_t SaturateRound(DType t, double v) {
  double lo = 0, hi = 0;
  IntegerRange(t, lo, hi);
  if (std::isnan(v)) return 0;
  return static_cast<int64_t>(std::clamp(std::nearbyint(v), lo, hi));  // FE_TONEAREST: even
}

void StoreQuantized(Tensor& y, int64_t i, double v, bool saturate) {
  if (IsNarrowFloatDType(y.dtype())) {
    y.mutable_data<uint8_t>()[i] = DoubleToFloat8(y.dtype(), v, saturate);
  } else {
    y.SetInt(i, SaturateRound(y.dtype(), v));
  }
}

double RoundTo(DType t, double v) {
  switch (t) {
    case DType::kFloat32:
      return static_cast<float>(v);
    case DType::kFloat16:
      return HalfToFloat(FloatToHalf(static_cast<float>(v)));
    case DType::kBFloat16:
      return BFloat16ToFloat(FloatToBFloat16(static_cast<float>(v)));
    default:
      return v;
  }
}

namespace {

// The blocked layout: same rank, every dim equal except axis, which holds ceil(n / block).
bool FitsBlocked(const std::vector<int64_t>& shape, const std::vector<int64_t>& p, int64_t axis,
                 int64_t block) {
  if (p.size() != shape.size()) return false;
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t want =
        static_cast<int64_t>(d) == axis ? (shape[d] + block - 1) / block : shape[d];
    if (p[d] != want) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ParamIndex(const Node& node, const std::vector<int64_t>& shape,
                                                const std::vector<int64_t>& param_shape,
                                                int64_t axis, int64_t block_size) {
  const int64_t n = NumElements(shape), pn = NumElements(param_shape);
  std::vector<int64_t> idx(n, 0);
  if (pn == 1 && param_shape.size() <= 1) return idx;  // per tensor
  ASSIGN_OR_RETURN(const int64_t a, NormalizeAxis(node, axis, static_cast<int64_t>(shape.size())));
  if (shape.empty()) return InvalidInput(node, "a scalar takes only a per-tensor scale");
  const std::vector<int64_t> strides = Strides(shape);
  if (block_size <= 0) {
    if (param_shape.size() != 1 || param_shape[0] != shape[a]) {
      return InvalidInput(node, "per-axis scale " + ShapeToString(param_shape) +
                                    " must be 1-D of the axis size " + std::to_string(shape[a]));
    }
    for (int64_t i = 0; i < n; ++i) idx[i] = i / strides[a] % shape[a];
    return idx;
  }
  if (!FitsBlocked(shape, param_shape, a, block_size)) {
    return InvalidInput(node, "blocked scale " + ShapeToString(param_shape) + " does not fit " +
                                  ShapeToString(shape) + " with block_size " +
                                  std::to_string(block_size));
  }
  const std::vector<int64_t> pstrides = Strides(param_shape);
  for (int64_t i = 0; i < n; ++i) {
    int64_t p = 0;
    for (size_t d = 0; d < shape.size(); ++d) {
      int64_t c = i / strides[d] % shape[d];
      if (static_cast<int64_t>(d) == a) c /= block_size;
      p += c * pstrides[d];
    }
    idx[i] = p;
  }
  return idx;
}

}  // namespace quant

namespace {

using quant::ParamIndex;

// Scale and zero point: the same shape (or both one element); the zero point defaults to 0.
struct QuantParams {
  std::vector<double> scale, zero;
  std::vector<int64_t> index;  // per element of x
};

absl::StatusOr<QuantParams> ReadParams(const Node& node, const Tensor& x, const Tensor& scale,
                                       const Tensor* zp) {
  // Per tensor, a [1] zero point with a scalar scale is fine (ONNX's own tests do that).
  if (zp && zp->shape() != scale.shape() && (zp->numel() != 1 || scale.numel() != 1)) {
    return InvalidInput(node, "zero point " + ShapeToString(zp->shape()) +
                                  " must have the scale's shape " + ShapeToString(scale.shape()));
  }
  QuantParams p;
  ASSIGN_OR_RETURN(p.index, ParamIndex(node, x.shape(), scale.shape(), node.GetInt("axis", 1),
                                       node.GetInt("block_size", 0)));
  p.scale = nn::ToDoubles(scale);
  p.zero = zp ? std::vector<double>(zp->numel()) : std::vector<double>(scale.numel(), 0.0);
  for (int64_t i = 0; zp && i < zp->numel(); ++i) p.zero[i] = zp->GetDouble(i);
  return p;
}

bool IsQuantizedType(DType t) {
  double lo, hi;
  return (quant::IntegerRange(t, lo, hi) && t != DType::kInt32) || IsNarrowFloatDType(t);
}

// The quantized output type: the zero point's, else output_dtype, else uint8.
absl::StatusOr<DType> QuantizedType(const Node& node, const Tensor* zp) {
  const int64_t attr = node.GetInt("output_dtype", 0);
  DType t = zp ? zp->dtype() : attr != 0 ? static_cast<DType>(attr) : DType::kUInt8;
  if (zp && attr != 0 && attr != static_cast<int64_t>(zp->dtype())) {
    return InvalidInput(node, "output_dtype disagrees with the zero point's dtype");
  }
  if (attr < 0 || attr > 1000 || !IsQuantizedType(t) || t == DType::kFloat8E8M0) {
    return Unsupported(node, "quantized type " + DTypeName(t) + " is not supported");
  }
  return t;
}

absl::StatusOr<std::vector<Tensor>> QuantizeLinear(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* scale, RequireInput(node, in, 1));
  const Tensor* zp = in.size() > 2 ? in[2] : nullptr;
  RETURN_IF_ERROR(nn::CheckFloat(node, *x));
  RETURN_IF_ERROR(nn::CheckFloat(node, *scale));
  ASSIGN_OR_RETURN(const DType qt, QuantizedType(node, zp));
  ASSIGN_OR_RETURN(QuantParams p, ReadParams(node, *x, *scale, zp));
  const int64_t prec_attr = node.GetInt("precision", 0);
  const DType prec =
      prec_attr > 0 && prec_attr < 1000 ? static_cast<DType>(prec_attr) : scale->dtype();
  const bool saturate = node.GetInt("saturate", 1) != 0;
  const std::vector<double> xv = nn::ToDoubles(*x);
  Tensor y(qt, x->shape());
  for (int64_t i = 0; i < x->numel(); ++i) {
    const int64_t k = p.index[i];
    const double q = quant::RoundTo(prec, xv[i] / p.scale[k]);
    if (IsNarrowFloatDType(qt)) {
      quant::StoreQuantized(y, i, q + p.zero[k], saturate);
    } else {
      quant::StoreQuantized(y, i, std::nearbyint(q) + p.zero[k], saturate);
    }
  }
  return std::vector<Tensor>{std::move(y)};
}

absl::StatusOr<std::vector<Tensor>> DequantizeLinear(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* scale, RequireInput(node, in, 1));
  const Tensor* zp = in.size() > 2 ? in[2] : nullptr;
  RETURN_IF_ERROR(nn::CheckFloat(node, *scale));
  double lo, hi;
  if (!quant::IntegerRange(x->dtype(), lo, hi) && !IsNarrowFloatDType(x->dtype())) {
    return Unsupported(node, "dtype " + DTypeName(x->dtype()) + " cannot be dequantized");
  }
  if (zp && zp->dtype() != x->dtype()) {
    return InvalidInput(node, "zero point must have x's dtype");
  }
  ASSIGN_OR_RETURN(QuantParams p, ReadParams(node, *x, *scale, zp));
  const int64_t out_attr = node.GetInt("output_dtype", 0);
  const DType out = out_attr != 0 ? static_cast<DType>(out_attr) : scale->dtype();
  if (out_attr < 0 || out_attr > 1000 || !IsFloatDType(out)) {
    return InvalidInput(node, "output_dtype must be a float type");
  }
  std::vector<double> y(x->numel());
  for (int64_t i = 0; i < x->numel(); ++i) {
    const int64_t k = p.index[i];
    y[i] = (x->GetDouble(i) - p.zero[k]) * p.scale[k];
  }
  return std::vector<Tensor>{nn::FromDoubles(out, x->shape(), y)};
}

// uint8 quantization with a scale and zero point from the data's range (extended to 0).
absl::StatusOr<std::vector<Tensor>> DynamicQuantizeLinear(const Node& node,
                                                          const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(nn::CheckFloat(node, *x));
  const std::vector<double> xv = nn::ToDoubles(*x);
  double mn = 0.0, mx = 0.0;
  for (double v : xv) {
    mn = std::fmin(mn, v);
    mx = std::fmax(mx, v);
  }
  // float32 arithmetic, as the operator's definition (and its test data) computes it.
  const float scale = static_cast<float>(mx - mn) / 255.0f;
  const double zero =
      scale == 0.0f ? 0.0 : quant::SaturateRound(DType::kUInt8, -static_cast<float>(mn) / scale);
  Tensor y(DType::kUInt8, x->shape());
  for (int64_t i = 0; i < x->numel(); ++i) {
    const double q = scale == 0.0f ? 0.0 : std::nearbyint(static_cast<float>(xv[i]) / scale);
    quant::StoreQuantized(y, i, q + zero, true);
  }
  return std::vector<Tensor>{std::move(y), nn::FromDoubles(x->dtype(), {}, {scale}),
                             nn::FromDoubles(DType::kUInt8, {}, {zero})};
}

}  // namespace

void RegisterQuantizeKernels(KernelRegistry& r) {
  RegisterQuantizedLinalgKernels(r);
  r.Register("", "QuantizeLinear", QuantizeLinear);
  r.Register("", "DequantizeLinear", DequantizeLinear);
  r.Register("", "DynamicQuantizeLinear", DynamicQuantizeLinear);
}

}  // namespace kiln::ref
