// Private to the reduction, search and indexing kernels (ops_reduction.cc, ops_gather.cc,
// ops_generate.cc): the sub-family registration functions that RegisterReductionKernels calls,
// and the small helpers they share.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "ops/kernel_util.h"

namespace kiln::ref {

void RegisterGatherScatterKernels(KernelRegistry& r);  // Gather*, Scatter*
void RegisterGeneratorKernels(KernelRegistry& r);      // OneHot, Trilu, EyeLike, Range

// Arithmetic happens in one of three "compute types": double for the float types (halves
// widen exactly), int64_t for signed integers and bool, uint64_t for unsigned integers, so
// integer results are exact and uint64 values above INT64_MAX survive.
template <class C>
C GetAs(const Tensor& t, int64_t i) {
  if constexpr (std::is_same_v<C, double>) {
    return t.GetDouble(i);
  } else if constexpr (std::is_same_v<C, uint64_t>) {
    return t.GetUInt(i);
  } else {
    return t.GetInt(i);
  }
}

template <class C>
void SetAs(Tensor& t, int64_t i, C v) {
  if constexpr (std::is_same_v<C, double>) {
    t.SetDouble(i, v);
  } else if constexpr (std::is_same_v<C, uint64_t>) {
    t.SetUInt(i, v);
  } else {
    t.SetInt(i, v);
  }
}

// Calls f(C{}) with the compute type of dtype; UNIMPLEMENTED for unsupported dtypes.
template <class F>
absl::Status DispatchCompute(const Node& node, DType t, F&& f) {
  RETURN_IF_ERROR(CheckSupportedDType(node, t));
  if (IsFloatDType(t)) {
    f(double{});
  } else if (IsIntegerDType(t) && !IsSignedDType(t)) {
    f(uint64_t{});
  } else {
    f(int64_t{});
  }
  return absl::OkStatus();
}

// Integer arithmetic wraps modulo 2^64 (through uint64_t, so there is no signed-overflow UB);
// truncating to the element type afterwards gives the element type's wrapped result.
template <class C>
C WrapAdd(C a, C b) {
  if constexpr (std::is_same_v<C, double>) {
    return a + b;
  } else {
    return static_cast<C>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  }
}

template <class C>
C WrapMul(C a, C b) {
  if constexpr (std::is_same_v<C, double>) {
    return a * b;
  } else {
    return static_cast<C>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  }
}

// A double converted to an integer compute type without UB: NaN becomes 0, out-of-range
// values saturate.
template <class C>
C FromDouble(double v) {
  if constexpr (std::is_same_v<C, double>) {
    return v;
  } else {
    if (std::isnan(v)) return 0;
    if (v <= static_cast<double>(std::numeric_limits<C>::lowest())) {
      return std::numeric_limits<C>::lowest();
    }
    if (v >= static_cast<double>(std::numeric_limits<C>::max())) {
      return std::numeric_limits<C>::max();
    }
    return static_cast<C>(v);
  }
}

// Checks an index tensor's dtype (int32 or int64, as every indexing schema requires).
absl::Status CheckIndexDType(const Node& node, const Tensor& t, const char* what);
// Maps an index in [-dim, dim) into [0, dim); INVALID_ARGUMENT otherwise.
absl::StatusOr<int64_t> NormalizeIndex(const Node& node, int64_t index, int64_t dim);
// Reads a scalar (or one-element) integer input such as CumSum's axis or Trilu's k.
absl::StatusOr<int64_t> ScalarInt(const Node& node, const Tensor& t, const char* what);
// Refuses outputs too large to allocate, which a hostile model could request through
// Range, OneHot or EyeLike, instead of crashing on allocation failure.
absl::Status CheckOutputSize(const Node& node, const std::vector<int64_t>& shape);

}  // namespace kiln::ref
