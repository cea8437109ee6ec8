// Binary and variadic arithmetic reference kernels: Add Sub Mul Div Mod Pow BitShift and
// Max Min Sum Mean, all with numpy broadcasting. Integer math is exact in the integer type
// (wraparound like C); integer division or modulo by zero is INVALID_ARGUMENT, not a trap.
#include <cmath>
#include <limits>

#include "ops/elementwise_util.h"

namespace kiln::ref::ew {
namespace {

// Runs a same-dtype binary op over the kinds K; fn sees compute values.
template <unsigned K, class Fn>
absl::StatusOr<Tensor> Arithmetic(const Node& node, const Tensor& a, const Tensor& b, Fn&& fn) {
  absl::StatusOr<Tensor> out;
  RETURN_IF_ERROR(Dispatch<K>(node, a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    out = BinaryLoop<T, T, T>(node, a, b, a.dtype(), fn);
  }));
  return out;
}

absl::Status DivisionByZero(const Node& node) {
  return InvalidInput(node, "integer division by zero");
}

absl::StatusOr<Tensor> Add(const Node& node, const Tensor& a, const Tensor& b) {
  return Arithmetic<kNumeric>(node, a, b, [](auto x, auto y) {
    if constexpr (std::is_floating_point_v<decltype(x)>) {
      return x + y;
    } else {
      return WrapAdd(x, y);
    }
  });
}

absl::StatusOr<Tensor> Sub(const Node& node, const Tensor& a, const Tensor& b) {
  return Arithmetic<kNumeric>(node, a, b, [](auto x, auto y) {
    if constexpr (std::is_floating_point_v<decltype(x)>) {
      return x - y;
    } else {
      return WrapSub(x, y);
    }
  });
}

absl::StatusOr<Tensor> Mul(const Node& node, const Tensor& a, const Tensor& b) {
  return Arithmetic<kNumeric>(node, a, b, [](auto x, auto y) {
    if constexpr (std::is_floating_point_v<decltype(x)>) {
      return x * y;
    } else {
      return WrapMul(x, y);
    }
  });
}

// Integer division truncates toward zero, as in C (ONNX's test_div_int32_trunc expects
// that, not numpy's floor division).
absl::StatusOr<Tensor> Div(const Node& node, const Tensor& a, const Tensor& b) {
  bool by_zero = false;
  ASSIGN_OR_RETURN(Tensor out, Arithmetic<kNumeric>(node, a, b, [&](auto x, auto y) {
                     using C = decltype(x);
                     if constexpr (std::is_floating_point_v<C>) {
                       return x / y;
                     } else {
                       if (y == 0) {
                         by_zero = true;
                         return C{0};
                       }
                       if constexpr (std::is_signed_v<C>) {
                         if (y == -1)
                           return WrapNeg(x);  // INT_MIN / -1 traps in C; the true answer wraps
                       }
                       return static_cast<C>(x / y);
                     }
                   }));
  if (by_zero) return DivisionByZero(node);
  return out;
}

// fmod=0: the result takes the divisor's sign (Python's %); fmod=1: the dividend's (C fmod).
absl::StatusOr<Tensor> Mod(const Node& node, const Tensor& a, const Tensor& b) {
  const bool c_fmod = node.GetInt("fmod", 0) != 0;
  bool by_zero = false;
  ASSIGN_OR_RETURN(Tensor out, Arithmetic<kNumeric>(node, a, b, [&](auto x, auto y) {
                     using C = decltype(x);
                     C r{};
                     if constexpr (std::is_floating_point_v<C>) {
                       r = std::fmod(x, y);
                     } else {
                       if (y == 0) {
                         by_zero = true;
                         return C{0};
                       }
                       if constexpr (std::is_signed_v<C>) {
                         if (y == -1) return C{0};  // INT_MIN % -1 traps in C
                       }
                       r = static_cast<C>(x % y);
                     }
                     if constexpr (std::is_signed_v<C>) {  // also true for double
                       if (!c_fmod && r != 0 && ((r < 0) != (y < 0))) r = static_cast<C>(r + y);
                     }
                     return r;
                   }));
  if (by_zero) return DivisionByZero(node);
  return out;
}

// base^exp exactly in the integer type (wrapping), by repeated squaring. A negative
// exponent gives the real result truncated toward zero (only |base| == 1 survives);
// 0^negative is a division by zero.
template <class C, class E>
C IntPow(C base, E exp, bool& by_zero) {
  if constexpr (std::is_signed_v<E>) {
    if (exp < 0) {
      if (base == 0) by_zero = true;
      if (base == 1) return C{1};
      if (base == C(-1)) return exp % 2 == 0 ? C{1} : C(-1);
      return C{0};
    }
  }
  C result{1};
  for (uint64_t e = static_cast<uint64_t>(exp); e != 0; e >>= 1) {
    if (e & 1u) result = WrapMul(result, base);
    base = WrapMul(base, base);
  }
  return result;
}

// Pow's base and exponent may differ in dtype; the output has the base's dtype.
absl::StatusOr<Tensor> Pow(const Node& node, const Tensor& a, const Tensor& b) {
  RETURN_IF_ERROR(CheckIn(node, a.dtype(),
                          {DType::kInt32, DType::kInt64, DType::kFloat16, DType::kBFloat16,
                           DType::kFloat32, DType::kFloat64}));
  bool by_zero = false;
  auto pow = [&by_zero](auto x, auto y) {
    if constexpr (std::is_integral_v<decltype(x)> && std::is_integral_v<decltype(y)>) {
      return IntPow(x, y, by_zero);
    } else {
      return std::pow(static_cast<double>(x), static_cast<double>(y));
    }
  };
  absl::StatusOr<Tensor> out;
  RETURN_IF_ERROR(Dispatch<kFloat | kSigned>(node, a.dtype(), [&](auto base_tag) {
    using TB = decltype(base_tag);
    absl::Status st = Dispatch<kNumeric>(node, b.dtype(), [&](auto exp_tag) {
      out = BinaryLoop<TB, decltype(exp_tag), TB>(node, a, b, a.dtype(), pow);
    });
    if (!st.ok()) out = st;
  }));
  if (out.ok() && by_zero) return DivisionByZero(node);
  return out;
}

absl::StatusOr<Tensor> BitShift(const Node& node, const Tensor& a, const Tensor& b) {
  const std::string dir = node.GetString("direction", "");
  if (dir != "LEFT" && dir != "RIGHT") {
    return InvalidInput(node, "direction must be LEFT or RIGHT, got '" + dir + "'");
  }
  const bool left = dir == "LEFT";
  return Arithmetic<kUnsigned>(node, a, b, [left](auto x, auto y) {
    using C = decltype(x);
    // Shifting by the width or more is UB in C; every bit is shifted out.
    if (y >= std::numeric_limits<C>::digits) return C{0};
    return static_cast<C>(left ? x << y : x >> y);
  });
}

template <class C>
bool IsNan(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

// Registers a variadic op (one or more inputs, one dtype, broadcast together).
template <unsigned K, class Combine, class Finish>
void RegisterVariadic(KernelRegistry& r, const std::string& op, Combine combine, Finish finish) {
  r.Register(kOnnxDomain, op,
             [=](const Node& node, const KernelInputs& in) -> absl::StatusOr<std::vector<Tensor>> {
               std::vector<const Tensor*> ins;
               for (const Tensor* t : in) {
                 if (t) ins.push_back(t);
               }
               if (ins.empty()) return InvalidInput(node, "needs at least one input");
               RETURN_IF_ERROR(CheckSameDType(node, in));
               const double n = static_cast<double>(ins.size());
               absl::StatusOr<Tensor> out;
               RETURN_IF_ERROR(Dispatch<K>(node, ins[0]->dtype(), [&](auto tag) {
                 using T = decltype(tag);
                 out = FoldLoop<T>(node, ins, combine, [&](auto acc) { return finish(acc, n); });
               }));
               RETURN_IF_ERROR(out.status());
               return std::vector<Tensor>{std::move(*out)};
             });
}

}  // namespace

void RegisterArithmeticKernels(KernelRegistry& r) {
  RegisterBinary(r, "Add", Add);
  RegisterBinary(r, "Sub", Sub);
  RegisterBinary(r, "Mul", Mul);
  RegisterBinary(r, "Div", Div);
  RegisterBinary(r, "Mod", Mod);
  RegisterBinary(r, "BitShift", BitShift);
  r.Register(kOnnxDomain, "Pow",
             [](const Node& node, const KernelInputs& in) -> absl::StatusOr<std::vector<Tensor>> {
               ASSIGN_OR_RETURN(const Tensor* a, RequireInput(node, in, 0));
               ASSIGN_OR_RETURN(const Tensor* b, RequireInput(node, in, 1));
               ASSIGN_OR_RETURN(Tensor y, Pow(node, *a, *b));
               return std::vector<Tensor>{std::move(y)};
             });

  auto keep = [](auto acc, double) { return acc; };
  // Max/Min propagate NaN, like numpy's maximum/minimum.
  RegisterVariadic<kNumeric>(
      r, "Max",
      [](auto acc, auto v) {
        return IsNan(acc) || IsNan(v) ? (IsNan(acc) ? acc : v) : (v > acc ? v : acc);
      },
      keep);
  RegisterVariadic<kNumeric>(
      r, "Min",
      [](auto acc, auto v) {
        return IsNan(acc) || IsNan(v) ? (IsNan(acc) ? acc : v) : (v < acc ? v : acc);
      },
      keep);
  // Sum and Mean are float-only; they accumulate in double and round once.
  RegisterVariadic<kFloat>(
      r, "Sum", [](double acc, double v) { return acc + v; }, keep);
  RegisterVariadic<kFloat>(
      r, "Mean", [](double acc, double v) { return acc + v; },
      [](double acc, double n) { return acc / n; });
}

}  // namespace kiln::ref::ew
