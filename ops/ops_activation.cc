// Activation reference kernels: Celu Clip Elu Gelu HardSigmoid HardSwish LeakyRelu Mish
// PRelu Relu Selu Shrink Sigmoid Softplus Softsign SwiGLU Swish ThresholdedRelu. The formulas are
// ONNX's definitions evaluated in double (attributes are float in the model; they widen exactly).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>

#include "ops/elementwise_util.h"

namespace kiln::ref::ew {
namespace {

// log(1 + e^x) without overflow for large x.
double Softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }

absl::StatusOr<Tensor> Celu(const Node& node, const Tensor& x) {
  const double alpha = node.GetFloat("alpha", 1.0f);
  if (alpha == 0) return InvalidInput(node, "alpha must be nonzero");
  return MapFloat(node, x, [alpha](double v) {
    if (std::isnan(v)) return v;  // numpy's maximum/minimum keep NaN; std::max/min would not
    return std::max(0.0, v) + std::min(0.0, alpha * std::expm1(v / alpha));
  });
}

absl::StatusOr<Tensor> Elu(const Node& node, const Tensor& x) {
  const double alpha = node.GetFloat("alpha", 1.0f);
  return MapFloat(node, x, [alpha](double v) { return v < 0 ? alpha * std::expm1(v) : v; });
}

absl::StatusOr<Tensor> Gelu(const Node& node, const Tensor& x) {
  const std::string approx = node.GetString("approximate", "none");
  if (approx == "none") {
    return MapFloat(node, x,
                    [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::numbers::sqrt2)); });
  }
  if (approx == "tanh") {
    const double k = std::sqrt(2.0 / std::numbers::pi);
    return MapFloat(node, x, [k](double v) {
      return 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)));
    });
  }
  return InvalidInput(node, "approximate must be 'none' or 'tanh', got '" + approx + "'");
}

absl::StatusOr<Tensor> HardSigmoid(const Node& node, const Tensor& x) {
  const double alpha = node.GetFloat("alpha", 0.2f);
  const double beta = node.GetFloat("beta", 0.5f);
  return MapFloat(node, x,
                  [alpha, beta](double v) { return std::clamp(alpha * v + beta, 0.0, 1.0); });
}

absl::StatusOr<Tensor> HardSwish(const Node& node, const Tensor& x) {
  return MapFloat(node, x, [](double v) { return v * std::clamp(v / 6.0 + 0.5, 0.0, 1.0); });
}

absl::StatusOr<Tensor> LeakyRelu(const Node& node, const Tensor& x) {
  const double alpha = node.GetFloat("alpha", 0.01f);
  return MapFloat(node, x, [alpha](double v) { return v < 0 ? alpha * v : v; });
}

absl::StatusOr<Tensor> Mish(const Node& node, const Tensor& x) {
  return MapFloat(node, x, [](double v) { return v * std::tanh(Softplus(v)); });
}

absl::StatusOr<Tensor> Relu(const Node& node, const Tensor& x) {
  return MapSame<kFloat | kSigned>(node, x, [](auto v) {
    using C = decltype(v);
    return v < C{0} ? C{0} : v;  // NaN is kept, like numpy's maximum
  });
}

absl::StatusOr<Tensor> Selu(const Node& node, const Tensor& x) {
  const double alpha = node.GetFloat("alpha", 1.67326319217681884765625f);
  const double gamma = node.GetFloat("gamma", 1.05070102214813232421875f);
  return MapFloat(node, x, [alpha, gamma](double v) {
    return v > 0 ? gamma * v : gamma * alpha * std::expm1(v);
  });
}

// Shrink accepts integers too; they go through double and truncate back.
absl::StatusOr<Tensor> Shrink(const Node& node, const Tensor& x) {
  const double bias = node.GetFloat("bias", 0.0f);
  const double lambd = node.GetFloat("lambd", 0.5f);
  return MapSame<kNumeric>(node, x, [bias, lambd](auto c) {
    const double v = static_cast<double>(c);
    if (v < -lambd) return v + bias;
    if (v > lambd) return v - bias;
    return 0.0;
  });
}

absl::StatusOr<Tensor> Sigmoid(const Node& node, const Tensor& x) {
  return MapFloat(node, x, [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
}

// Swish (opset 24): x * sigmoid(alpha * x).
double SwishOf(double v, double alpha) { return v / (1.0 + std::exp(-alpha * v)); }

absl::StatusOr<Tensor> Swish(const Node& node, const Tensor& x) {
  const double alpha = node.GetFloat("alpha", 1.0f);
  return MapFloat(node, x, [alpha](double v) { return SwishOf(v, alpha); });
}

// SwiGLU (opset 28): Swish_alpha(A) * B over two inputs of one shape (no broadcasting).
absl::StatusOr<Tensor> SwiGlu(const Node& node, const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) {
    return InvalidInput(node, "A " + ShapeToString(a.shape()) + " and B " +
                                  ShapeToString(b.shape()) + " must have one shape");
  }
  const double alpha = node.GetFloat("alpha", 1.0f);
  absl::StatusOr<Tensor> out;
  RETURN_IF_ERROR(Dispatch<kFloat>(node, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    out = BinaryLoop<T, T, T>(node, a, b, a.dtype(),
                              [alpha](double u, double v) { return SwishOf(u, alpha) * v; });
  }));
  return out;
}

absl::StatusOr<Tensor> SoftplusOp(const Node& node, const Tensor& x) {
  return MapFloat(node, x, Softplus);
}

absl::StatusOr<Tensor> Softsign(const Node& node, const Tensor& x) {
  return MapFloat(node, x, [](double v) { return v / (1.0 + std::fabs(v)); });
}

absl::StatusOr<Tensor> ThresholdedRelu(const Node& node, const Tensor& x) {
  const double alpha = node.GetFloat("alpha", 1.0f);
  return MapFloat(node, x, [alpha](double v) { return v > alpha ? v : 0.0; });
}

// PRelu's slope broadcasts to X only (unidirectionally): the output has X's shape.
absl::StatusOr<Tensor> PRelu(const Node& node, const Tensor& x, const Tensor& slope) {
  RETURN_IF_ERROR(CheckIn(node, x.dtype(),
                          {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64,
                           DType::kInt32, DType::kInt64, DType::kUInt32, DType::kUInt64}));
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, BroadcastShapes(node, {x.shape(), slope.shape()}));
  if (shape != x.shape()) {
    return InvalidInput(node, "slope " + ShapeToString(slope.shape()) +
                                  " does not broadcast to X " + ShapeToString(x.shape()));
  }
  absl::StatusOr<Tensor> out;
  RETURN_IF_ERROR(Dispatch<kNumeric>(node, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    out = BinaryLoop<T, T, T>(node, x, slope, x.dtype(), [](auto v, auto s) {
      using C = decltype(v);
      if constexpr (std::is_floating_point_v<C>) {
        return v < 0 ? s * v : v;
      } else {
        return v < C{0} ? WrapMul(s, v) : v;
      }
    });
  }));
  return out;
}

// Reads an optional scalar bound of Clip (input i), as a compute value of storage type T.
template <class T>
absl::StatusOr<std::optional<Compute<T>>> ClipBound(const Node& node, const KernelInputs& in,
                                                    size_t i) {
  const Tensor* t = i < in.size() ? in[i] : nullptr;
  if (!t) return std::optional<Compute<T>>();
  if (t->numel() != 1) {
    return InvalidInput(node, std::string(i == 1 ? "min" : "max") + " must be a scalar, got " +
                                  ShapeToString(t->shape()));
  }
  return std::optional<Compute<T>>(Load(t->data<T>()[0]));
}

// Clip: min and max are optional scalar inputs; with min > max every value becomes max
// (numpy's clip, which ONNX's test_clip_min_greater_than_max expects). NaN is kept.
absl::StatusOr<std::vector<Tensor>> Clip(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
  RETURN_IF_ERROR(CheckSameDType(node, in));
  absl::StatusOr<Tensor> out;
  RETURN_IF_ERROR(Dispatch<kNumeric>(node, x->dtype(), [&](auto tag) {
    using T = decltype(tag);
    absl::StatusOr<std::optional<Compute<T>>> lo = ClipBound<T>(node, in, 1);
    absl::StatusOr<std::optional<Compute<T>>> hi = ClipBound<T>(node, in, 2);
    if (!lo.ok() || !hi.ok()) {
      out = lo.ok() ? hi.status() : lo.status();
      return;
    }
    out = UnaryLoop<T, T>(*x, x->dtype(), [&](Compute<T> v) {
      if (*lo && v < **lo) v = **lo;
      if (*hi && v > **hi) v = **hi;
      return v;
    });
  }));
  RETURN_IF_ERROR(out.status());
  return std::vector<Tensor>{std::move(*out)};
}

}  // namespace

void RegisterActivationKernels(KernelRegistry& r) {
  RegisterUnary(r, "Celu", Celu);
  RegisterUnary(r, "Elu", Elu);
  RegisterUnary(r, "Gelu", Gelu);
  RegisterUnary(r, "HardSigmoid", HardSigmoid);
  RegisterUnary(r, "HardSwish", HardSwish);
  RegisterUnary(r, "LeakyRelu", LeakyRelu);
  RegisterUnary(r, "Mish", Mish);
  RegisterUnary(r, "Relu", Relu);
  RegisterUnary(r, "Selu", Selu);
  RegisterUnary(r, "Shrink", Shrink);
  RegisterUnary(r, "Sigmoid", Sigmoid);
  RegisterUnary(r, "Softplus", SoftplusOp);
  RegisterUnary(r, "Softsign", Softsign);
  RegisterUnary(r, "ThresholdedRelu", ThresholdedRelu);
  RegisterUnary(r, "Swish", Swish);
  RegisterBinary(r, "SwiGLU", SwiGlu);
  RegisterBinary(r, "PRelu", PRelu);
  r.Register(kOnnxDomain, "Clip", Clip);
}

}  // namespace kiln::ref::ew
