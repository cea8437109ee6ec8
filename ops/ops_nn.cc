// The NN family's entry point, the helpers its files share (nn_ops.h), and Dropout.
#include <cmath>
#include <limits>

#include "ops/kernel_util.h"
#include "ops/nn_ops.h"
#include "ops/quantize_util.h"

namespace kiln::ref {
namespace nn {
namespace {

template <class T>
void Widen(const T* src, int64_t n, double* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<double>(src[i]);
}

// Saturating double -> integer conversion: NaN becomes 0, out-of-range values clamp, so a
// hostile input never reaches undefined behaviour.
template <class T>
T SaturateTo(double v) {
  if (std::isnan(v)) return T{0};
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::lowest());
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  if (v <= lo) return std::numeric_limits<T>::lowest();
  if (v >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

template <class T>
void Narrow(const std::vector<double>& v, T* dst) {
  for (size_t i = 0; i < v.size(); ++i) dst[i] = SaturateTo<T>(v[i]);
}

}  // namespace

absl::StatusOr<int64_t> CheckedNumel(const Node& node, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return InvalidInput(node, "negative dim in " + ShapeToString(shape));
    if (d != 0 && n > kMaxElements / d) {
      return InvalidInput(node, "output shape " + ShapeToString(shape) + " is too large");
    }
    n *= d;
  }
  return n;
}

absl::Status CheckFloat(const Node& node, const Tensor& t) {
  return CheckDType(node, t.dtype(),
                    {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16});
}

absl::Status CheckNumeric(const Node& node, const Tensor& t) {
  RETURN_IF_ERROR(CheckSupportedDType(node, t.dtype()));
  if (IsFloatDType(t.dtype()) || IsIntegerDType(t.dtype())) return absl::OkStatus();
  return Unsupported(node, "dtype " + DTypeName(t.dtype()) + " is not supported by this operator");
}

std::vector<double> ToDoubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::kFloat32:
      Widen(t.data<float>(), n, v.data());
      break;
    case DType::kFloat64:
      Widen(t.data<double>(), n, v.data());
      break;
    case DType::kFloat16:
      for (int64_t i = 0; i < n; ++i) v[i] = HalfToFloat(t.data<uint16_t>()[i]);
      break;
    case DType::kBFloat16:
      for (int64_t i = 0; i < n; ++i) v[i] = BFloat16ToFloat(t.data<uint16_t>()[i]);
      break;
    case DType::kInt8:
      Widen(t.data<int8_t>(), n, v.data());
      break;
    case DType::kInt16:
      Widen(t.data<int16_t>(), n, v.data());
      break;
    case DType::kInt32:
      Widen(t.data<int32_t>(), n, v.data());
      break;
    case DType::kInt64:
      Widen(t.data<int64_t>(), n, v.data());
      break;
    case DType::kUInt8:
      Widen(t.data<uint8_t>(), n, v.data());
      break;
    case DType::kUInt16:
      Widen(t.data<uint16_t>(), n, v.data());
      break;
    case DType::kUInt32:
      Widen(t.data<uint32_t>(), n, v.data());
      break;
    case DType::kUInt64:
      Widen(t.data<uint64_t>(), n, v.data());
      break;
    default:
      for (int64_t i = 0; i < n; ++i) v[i] = t.GetDouble(i);
      break;
  }
  return v;
}

Tensor FromDoubles(DType dtype, std::vector<int64_t> shape, const std::vector<double>& v) {
  Tensor t(dtype, std::move(shape));
  const int64_t n = t.numel();
  switch (dtype) {
    case DType::kFloat32:
      for (int64_t i = 0; i < n; ++i) t.mutable_data<float>()[i] = static_cast<float>(v[i]);
      break;
    case DType::kFloat64:
      for (int64_t i = 0; i < n; ++i) t.mutable_data<double>()[i] = v[i];
      break;
    case DType::kInt8:
      Narrow(v, t.mutable_data<int8_t>());
      break;
    case DType::kInt16:
      Narrow(v, t.mutable_data<int16_t>());
      break;
    case DType::kInt32:
      Narrow(v, t.mutable_data<int32_t>());
      break;
    case DType::kInt64:
      Narrow(v, t.mutable_data<int64_t>());
      break;
    case DType::kUInt8:
      Narrow(v, t.mutable_data<uint8_t>());
      break;
    case DType::kUInt16:
      Narrow(v, t.mutable_data<uint16_t>());
      break;
    case DType::kUInt32:
      Narrow(v, t.mutable_data<uint32_t>());
      break;
    case DType::kUInt64:
      Narrow(v, t.mutable_data<uint64_t>());
      break;
    default:  // float16, bfloat16, bool: the tensor's own conversion
      for (int64_t i = 0; i < n; ++i) t.SetDouble(i, v[i]);
      break;
  }
  return t;
}

absl::StatusOr<std::vector<double>> FloatInput(const Node& node, const KernelInputs& in, size_t i,
                                               const Tensor* like) {
  ASSIGN_OR_RETURN(const Tensor* t, RequireInput(node, in, i));
  RETURN_IF_ERROR(CheckFloat(node, *t));
  if (like && t->dtype() != like->dtype()) {
    return InvalidInput(node, "input " + std::to_string(i) + " is " + DTypeName(t->dtype()) +
                                  ", expected " + DTypeName(like->dtype()));
  }
  return ToDoubles(*t);
}

absl::StatusOr<std::vector<double>> BroadcastTo(const Node& node, const Tensor& t,
                                                const std::vector<int64_t>& shape) {
  RETURN_IF_ERROR(CheckNumeric(node, t));
  const int64_t r = static_cast<int64_t>(shape.size());
  bool ok = t.rank() <= r;
  for (int64_t i = 0; ok && i < t.rank(); ++i) {
    ok = t.dim(i) == 1 || t.dim(i) == shape[r - t.rank() + i];
  }
  if (!ok) {
    return InvalidInput(node, "shape " + ShapeToString(t.shape()) + " does not broadcast to " +
                                  ShapeToString(shape));
  }
  const std::vector<double> v = ToDoubles(t);
  BroadcastIndexer index(t.shape(), shape);
  std::vector<double> out(static_cast<size_t>(NumElements(shape)));
  for (size_t i = 0; i < out.size(); ++i) out[i] = v[index(static_cast<int64_t>(i))];
  return out;
}

AxisSplit SplitAtAxis(const std::vector<int64_t>& shape, int64_t axis) {
  AxisSplit s;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (i < axis) s.outer *= shape[i];
    if (i == axis) s.len = shape[i];
    if (i > axis) s.inner *= shape[i];
  }
  return s;
}

namespace {

// Inference Dropout is the identity. Training mode with a nonzero ratio draws random numbers
// whose stream (seed semantics) no reference can reproduce, so it is unsupported.
absl::StatusOr<std::vector<Tensor>> Dropout(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckSupportedDType(node, x->dtype()));
  double ratio = 0.5;
  if (in.size() > 1 && in[1]) {
    if (in[1]->numel() != 1) return InvalidInput(node, "ratio must be a scalar");
    ratio = in[1]->GetDouble(0);
  }
  bool training = false;
  if (in.size() > 2 && in[2]) {
    if (in[2]->numel() != 1) return InvalidInput(node, "training_mode must be a scalar");
    training = in[2]->GetDouble(0) != 0.0;
  }
  if (!(ratio >= 0.0 && ratio < 1.0)) return InvalidInput(node, "ratio must be in [0, 1)");
  if (training && ratio != 0.0) {
    return Unsupported(node, "training-mode Dropout is random; its stream cannot be matched");
  }
  std::vector<Tensor> outs{x->Clone()};
  if (node.output(1)) {
    Tensor mask(DType::kBool, x->shape());
    for (int64_t i = 0; i < mask.numel(); ++i) mask.mutable_data<uint8_t>()[i] = 1;
    outs.push_back(std::move(mask));
  }
  return outs;
}

}  // namespace
}  // namespace nn

void RegisterNnKernels(KernelRegistry& r) {
  nn::RegisterConvKernels(r);
  nn::RegisterPoolKernels(r);
  nn::RegisterNormKernels(r);
  nn::RegisterMatMulKernels(r);
  nn::RegisterSoftmaxKernels(r);
  nn::RegisterEinsumKernels(r);
  nn::RegisterLossKernels(r);
  nn::RegisterAttentionKernels(r);
  nn::RegisterRotaryKernels(r);
  RegisterQuantizeKernels(r);
  nn::RegisterLinalgKernels(r);
  nn::RegisterUnpoolKernels(r);
  nn::RegisterGridKernels(r);
  nn::RegisterDetectionKernels(r);
  nn::RegisterRecurrentKernels(r);
  nn::RegisterSignalKernels(r);
  r.Register("", "Dropout", nn::Dropout);
}

}  // namespace kiln::ref
