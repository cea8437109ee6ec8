// Private helpers for the element-wise reference kernels (ops_elementwise*.cc,
// ops_activation.cc): compute types, rounding, integer wraparound, dtype dispatch and the
// broadcast loops every unary, binary and variadic operator is written on.
//
// Numeric model: float storage types (float16, bfloat16, float32, float64) are loaded into
// double, computed there and rounded once on store. Integers compute exactly in their own
// type with C-style wraparound (done through uint64_t, so there is no signed-overflow UB and
// 64-bit values never pass through a double). Bool computes as bool.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops/kernel_util.h"

namespace kiln::ref::ew {

// ---- Compute types ----------------------------------------------------------------------

template <class T>
inline constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;
template <class T>
inline constexpr bool kIsFloatStorage = std::is_floating_point_v<T> || kIsHalf<T>;

template <class T>
using Compute = std::conditional_t<kIsFloatStorage<T>, double, T>;

template <class T>
Compute<T> Load(T v) {
  if constexpr (std::is_same_v<T, Float16>) {
    return HalfToFloat(v.bits);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16ToFloat(v.bits);
  } else {
    return v;
  }
}

// double -> float rounding to odd. Rounding to odd first and to nearest-even second gives the
// correctly rounded double -> half / bfloat16 result (float keeps >= 2 extra bits), so the
// 16-bit types are rounded once, as if directly from double.
inline float NarrowToOdd(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits |= 1u;
  std::memcpy(&f, &bits, sizeof bits);
  return f;
}

// double -> integer the way a reference should never crash: NaN is 0, out-of-range values
// saturate, everything else truncates toward zero (as C and numpy's astype do in range).
template <class T>
T SaturateCast(double d) {
  using L = std::numeric_limits<T>;
  if (std::isnan(d)) return T{0};
  if (d >= std::ldexp(1.0, L::digits)) return L::max();
  if (d <= static_cast<double>(L::lowest())) return L::lowest();
  return static_cast<T>(d);
}

// Stores a computed value into storage type T, rounding once.
template <class T, class V>
T Store(V v) {
  if constexpr (std::is_same_v<T, Float16>) {
    return Float16{FloatToHalf(NarrowToOdd(static_cast<double>(v)))};
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16{FloatToBFloat16(NarrowToOdd(static_cast<double>(v)))};
  } else if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, bool>) {
    return static_cast<T>(v);
  } else if constexpr (std::is_floating_point_v<V>) {
    return SaturateCast<T>(static_cast<double>(v));
  } else {
    return static_cast<T>(v);
  }
}

// ---- Integer arithmetic with C wraparound ----------------------------------------------

// Conversions to and from uint64_t are modular (C++20), so this is two's-complement wrap
// for every width without ever overflowing a signed type (uint16*uint16 would, via int).
template <class T>
T WrapAdd(T a, T b) {
  return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
template <class T>
T WrapSub(T a, T b) {
  return static_cast<T>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
template <class T>
T WrapMul(T a, T b) {
  return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
template <class T>
T WrapNeg(T a) {
  return WrapSub(T{0}, a);
}

// ---- Dtype dispatch ---------------------------------------------------------------------

enum Kinds : unsigned {
  kFloat = 1,     // float16, bfloat16, float32, float64
  kSigned = 2,    // int8..int64
  kUnsigned = 4,  // uint8..uint64
  kBool = 8,
  kInts = kSigned | kUnsigned,
  kNumeric = kFloat | kInts,
  kAll = kNumeric | kBool,
};

absl::Status NotForThisOp(const Node& node, DType t);

// Calls f(T{}) for the storage type T of `t` when t's kind is in K; only those types are
// instantiated. Other dtypes: UNIMPLEMENTED (string/float8/int4 and types the op lacks).
template <unsigned K, class F>
absl::Status Dispatch(const Node& node, DType t, F&& f) {
#define KILN_EW_CASE(dt, type, kind)   \
  case DType::dt:                      \
    if constexpr ((K & (kind)) != 0) { \
      f(type{});                       \
      return absl::OkStatus();         \
    }                                  \
    break;
  switch (t) {
    KILN_EW_CASE(kFloat32, float, kFloat)
    KILN_EW_CASE(kFloat64, double, kFloat)
    KILN_EW_CASE(kFloat16, Float16, kFloat)
    KILN_EW_CASE(kBFloat16, BFloat16, kFloat)
    KILN_EW_CASE(kInt8, int8_t, kSigned)
    KILN_EW_CASE(kInt16, int16_t, kSigned)
    KILN_EW_CASE(kInt32, int32_t, kSigned)
    KILN_EW_CASE(kInt64, int64_t, kSigned)
    KILN_EW_CASE(kUInt8, uint8_t, kUnsigned)
    KILN_EW_CASE(kUInt16, uint16_t, kUnsigned)
    KILN_EW_CASE(kUInt32, uint32_t, kUnsigned)
    KILN_EW_CASE(kUInt64, uint64_t, kUnsigned)
    KILN_EW_CASE(kBool, bool, kBool)
    default:
      break;
  }
#undef KILN_EW_CASE
  return NotForThisOp(node, t);
}

// UNIMPLEMENTED unless t is in `allowed` (for ops whose type list is not a union of kinds).
absl::Status CheckIn(const Node& node, DType t, const std::vector<DType>& allowed);
// INVALID_ARGUMENT unless every present input has the dtype of the first present one.
absl::Status CheckSameDType(const Node& node, const KernelInputs& in);

// ---- Broadcast loops --------------------------------------------------------------------

// out[i] = fn(x[i]); TI/TO are storage types, fn sees and returns compute values.
template <class TI, class TO, class Fn>
Tensor UnaryLoop(const Tensor& x, DType out_dtype, Fn&& fn) {
  Tensor out(out_dtype, x.shape());
  const TI* px = x.data<TI>();
  TO* po = out.mutable_data<TO>();
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = Store<TO>(fn(Load(px[i])));
  return out;
}

// out[i] = fn(a[.], b[.]) over the numpy broadcast of a and b.
template <class TA, class TB, class TO, class Fn>
absl::StatusOr<Tensor> BinaryLoop(const Node& node, const Tensor& a, const Tensor& b,
                                  DType out_dtype, Fn&& fn) {
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, BroadcastShapes(node, {a.shape(), b.shape()}));
  Tensor out(out_dtype, shape);
  BroadcastIndexer ia(a.shape(), shape);
  BroadcastIndexer ib(b.shape(), shape);
  const TA* pa = a.data<TA>();
  const TB* pb = b.data<TB>();
  TO* po = out.mutable_data<TO>();
  for (int64_t i = 0; i < out.numel(); ++i) {
    po[i] = Store<TO>(fn(Load(pa[ia(i)]), Load(pb[ib(i)])));
  }
  return out;
}

// Variadic fold over the broadcast of all inputs (same storage type T):
// out = finish(combine(...combine(in0, in1)..., inN)).
template <class T, class Combine, class Finish>
absl::StatusOr<Tensor> FoldLoop(const Node& node, const std::vector<const Tensor*>& ins,
                                Combine&& combine, Finish&& finish) {
  std::vector<std::vector<int64_t>> shapes;
  for (const Tensor* t : ins) shapes.push_back(t->shape());
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, BroadcastShapes(node, shapes));
  Tensor out(ins[0]->dtype(), shape);
  std::vector<BroadcastIndexer> idx;
  for (const Tensor* t : ins) idx.emplace_back(t->shape(), shape);
  T* po = out.mutable_data<T>();
  for (int64_t i = 0; i < out.numel(); ++i) {
    Compute<T> acc = Load(ins[0]->data<T>()[idx[0](i)]);
    for (size_t k = 1; k < ins.size(); ++k) acc = combine(acc, Load(ins[k]->data<T>()[idx[k](i)]));
    po[i] = Store<T>(finish(acc));
  }
  return out;
}

// y = fn(x) with the dtype of x, for the kinds K the operator allows.
template <unsigned K, class Fn>
absl::StatusOr<Tensor> MapSame(const Node& node, const Tensor& x, Fn&& fn) {
  absl::StatusOr<Tensor> out;
  RETURN_IF_ERROR(Dispatch<K>(node, x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    out = UnaryLoop<T, T>(x, x.dtype(), fn);
  }));
  return out;
}

// y = fn(x) for floating-point x (fn sees and returns double).
template <class Fn>
absl::StatusOr<Tensor> MapFloat(const Node& node, const Tensor& x, Fn&& fn) {
  return MapSame<kFloat>(node, x, std::forward<Fn>(fn));
}

// ---- Registration -----------------------------------------------------------------------

using UnaryKernel = std::function<absl::StatusOr<Tensor>(const Node&, const Tensor&)>;
using BinaryKernel =
    std::function<absl::StatusOr<Tensor>(const Node&, const Tensor&, const Tensor&)>;

// Registers a one-input, one-output kernel (input 0 required).
void RegisterUnary(KernelRegistry& r, const std::string& op, UnaryKernel fn);
// Registers a two-input kernel; checks both inputs are present and of one dtype.
void RegisterBinary(KernelRegistry& r, const std::string& op, BinaryKernel fn);

// The parts of RegisterElementwiseKernels, one per file.
void RegisterMathKernels(KernelRegistry& r);        // ops_elementwise.cc
void RegisterArithmeticKernels(KernelRegistry& r);  // ops_elementwise_binary.cc
void RegisterLogicKernels(KernelRegistry& r);       // ops_elementwise_logic.cc
void RegisterActivationKernels(KernelRegistry& r);  // ops_activation.cc
void RegisterBitwiseKernels(KernelRegistry& r);     // ops_bitwise.cc

}  // namespace kiln::ref::ew
