// Element-wise reference kernels: the shared registration helpers and the unary math
// operators. Binary arithmetic, logic/comparison and activations live in the sibling
// ops_elementwise_*.cc / ops_activation.cc files; RegisterElementwiseKernels calls them all.
#include <algorithm>
#include <cmath>

#include "ops/elementwise_util.h"

namespace kiln::ref {
namespace ew {

absl::Status NotForThisOp(const Node& node, DType t) {
  RETURN_IF_ERROR(CheckSupportedDType(node, t));
  return Unsupported(node, "dtype " + DTypeName(t) + " is not supported by this operator");
}

absl::Status CheckIn(const Node& node, DType t, const std::vector<DType>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), t) != allowed.end()) return absl::OkStatus();
  return NotForThisOp(node, t);
}

absl::Status CheckSameDType(const Node& node, const KernelInputs& in) {
  const Tensor* first = nullptr;
  for (const Tensor* t : in) {
    if (!t) continue;
    if (!first) {
      first = t;
    } else if (t->dtype() != first->dtype()) {
      return InvalidInput(node, "inputs must share one dtype, got " + DTypeName(first->dtype()) +
                                    " and " + DTypeName(t->dtype()));
    }
  }
  return absl::OkStatus();
}

void RegisterUnary(KernelRegistry& r, const std::string& op, UnaryKernel fn) {
  r.Register(kOnnxDomain, op,
             [fn](const Node& node, const KernelInputs& in) -> absl::StatusOr<std::vector<Tensor>> {
               ASSIGN_OR_RETURN(const Tensor* x, RequireInput(node, in, 0));
               ASSIGN_OR_RETURN(Tensor y, fn(node, *x));
               return std::vector<Tensor>{std::move(y)};
             });
}

void RegisterBinary(KernelRegistry& r, const std::string& op, BinaryKernel fn) {
  r.Register(kOnnxDomain, op,
             [fn](const Node& node, const KernelInputs& in) -> absl::StatusOr<std::vector<Tensor>> {
               ASSIGN_OR_RETURN(const Tensor* a, RequireInput(node, in, 0));
               ASSIGN_OR_RETURN(const Tensor* b, RequireInput(node, in, 1));
               RETURN_IF_ERROR(CheckSameDType(node, in));
               ASSIGN_OR_RETURN(Tensor y, fn(node, *a, *b));
               return std::vector<Tensor>{std::move(y)};
             });
}

namespace {

using DoubleFn = double (*)(double);

struct FloatUnary {
  const char* op;
  DoubleFn fn;
};

// Float-only unary operators: each is one libm call in double.
const FloatUnary kFloatUnary[] = {
    {"Acos", [](double x) { return std::acos(x); }},
    {"Acosh", [](double x) { return std::acosh(x); }},
    {"Asin", [](double x) { return std::asin(x); }},
    {"Asinh", [](double x) { return std::asinh(x); }},
    {"Atan", [](double x) { return std::atan(x); }},
    {"Atanh", [](double x) { return std::atanh(x); }},
    {"Ceil", [](double x) { return std::ceil(x); }},
    {"Cos", [](double x) { return std::cos(x); }},
    {"Cosh", [](double x) { return std::cosh(x); }},
    {"Exp", [](double x) { return std::exp(x); }},
    {"Floor", [](double x) { return std::floor(x); }},
    {"Log", [](double x) { return std::log(x); }},
    {"Reciprocal", [](double x) { return 1.0 / x; }},
    // nearbyint rounds in the current mode, which is the default round-half-to-even that
    // ONNX's Round specifies (std::round would round halves away from zero).
    {"Round", [](double x) { return std::nearbyint(x); }},
    {"Sin", [](double x) { return std::sin(x); }},
    {"Sinh", [](double x) { return std::sinh(x); }},
    {"Sqrt", [](double x) { return std::sqrt(x); }},
    {"Tan", [](double x) { return std::tan(x); }},
    {"Tanh", [](double x) { return std::tanh(x); }},
};

absl::StatusOr<Tensor> Abs(const Node& node, const Tensor& x) {
  return MapSame<kNumeric>(node, x, [](auto v) {
    using C = decltype(v);
    if constexpr (std::is_floating_point_v<C>) {
      return std::fabs(v);
    } else if constexpr (std::is_signed_v<C>) {
      return v < 0 ? WrapNeg(v) : v;  // abs(INT_MIN) wraps to INT_MIN, as in C
    } else {
      return v;
    }
  });
}

absl::StatusOr<Tensor> Neg(const Node& node, const Tensor& x) {
  return MapSame<kFloat | kSigned>(node, x, [](auto v) {
    if constexpr (std::is_floating_point_v<decltype(v)>) {
      return -v;
    } else {
      return WrapNeg(v);
    }
  });
}

absl::StatusOr<Tensor> Sign(const Node& node, const Tensor& x) {
  return MapSame<kNumeric>(node, x, [](auto v) {
    using C = decltype(v);
    if (v > C{0}) return C{1};
    if constexpr (std::is_signed_v<C>) {
      if (v < C{0}) return C{-1};
    }
    return v;  // zero stays zero (and NaN stays NaN)
  });
}

// Erf accepts integers too: they go through double and truncate back.
absl::StatusOr<Tensor> Erf(const Node& node, const Tensor& x) {
  return MapSame<kNumeric>(node, x, [](auto v) { return std::erf(static_cast<double>(v)); });
}

absl::StatusOr<Tensor> Not(const Node& node, const Tensor& x) {
  return MapSame<kBool>(node, x, [](bool v) { return !v; });
}

// x -> bool through pred(double), for floating-point x.
template <class Pred>
absl::StatusOr<Tensor> FloatPredicate(const Node& node, const Tensor& x, Pred pred) {
  absl::StatusOr<Tensor> out;
  RETURN_IF_ERROR(Dispatch<kFloat>(node, x.dtype(), [&](auto tag) {
    out = UnaryLoop<decltype(tag), bool>(x, DType::kBool, pred);
  }));
  return out;
}

absl::StatusOr<Tensor> IsInf(const Node& node, const Tensor& x) {
  const bool neg = node.GetInt("detect_negative", 1) != 0;
  const bool pos = node.GetInt("detect_positive", 1) != 0;
  return FloatPredicate(node, x,
                        [neg, pos](double v) { return std::isinf(v) && (v > 0 ? pos : neg); });
}

absl::StatusOr<Tensor> IsNaN(const Node& node, const Tensor& x) {
  return FloatPredicate(node, x, [](double v) { return std::isnan(v); });
}

}  // namespace

void RegisterMathKernels(KernelRegistry& r) {
  for (const FloatUnary& u : kFloatUnary) {
    DoubleFn fn = u.fn;
    RegisterUnary(r, u.op,
                  [fn](const Node& node, const Tensor& x) { return MapFloat(node, x, fn); });
  }
  RegisterUnary(r, "Abs", Abs);
  RegisterUnary(r, "Neg", Neg);
  RegisterUnary(r, "Sign", Sign);
  RegisterUnary(r, "Erf", Erf);
  RegisterUnary(r, "Not", Not);
  RegisterUnary(r, "IsInf", IsInf);
  RegisterUnary(r, "IsNaN", IsNaN);
}

}  // namespace ew

void RegisterElementwiseKernels(KernelRegistry& r) {
  ew::RegisterMathKernels(r);
  ew::RegisterArithmeticKernels(r);
  ew::RegisterLogicKernels(r);
  ew::RegisterActivationKernels(r);
  ew::RegisterBitwiseKernels(r);
}

}  // namespace kiln::ref
