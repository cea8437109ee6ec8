// Cast between bool, uint8, int8, int32, int64, float32 and float64, with the reference's
// rules (ops/ops_cast.cc): integers wrap, floats truncate toward zero into
// integers and saturate at the target's range (NaN -> 0), anything nonzero (NaN too) is
// true. Attention masks meet this op on every run of a text model; other dtypes fall back.
#include <cmath>
#include <limits>
#include <type_traits>

#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {
namespace {

template <class To, class From>
To Convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From{0} || v != v;  // NaN is true
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    if (v != v) return To{0};
    const double t = std::trunc(static_cast<double>(v));
    // The range ends as doubles are exact (0, -2^k, and 2^k just past the maximum).
    constexpr double lo = static_cast<double>(std::numeric_limits<To>::min());
    constexpr double past = std::is_signed_v<To> ? -lo
                                                 : static_cast<double>(std::numeric_limits<To>::max()) + 1.0;
    if (t <= lo) return std::numeric_limits<To>::min();
    if (t >= past) return std::numeric_limits<To>::max();
    return static_cast<To>(t);
  } else {
    return static_cast<To>(v);  // integer wraparound (C++20), float rounding to nearest
  }
}

// Bool inputs are read as bytes (any nonzero byte is true), never as C++ bool.
template <class To, class From>
void CastLoop(const void* x, int64_t start, int64_t stride, void* y, int64_t n) {
  To* out = static_cast<To*>(y);
  if constexpr (std::is_same_v<From, bool>) {
    const uint8_t* in = static_cast<const uint8_t*>(x) + start;
    for (int64_t i = 0; i < n; ++i) out[i] = Convert<To>(static_cast<uint8_t>(in[i * stride] != 0));
  } else {
    const From* in = static_cast<const From*>(x) + start;
    for (int64_t i = 0; i < n; ++i) out[i] = Convert<To>(in[i * stride]);
  }
}

template <class From>
CastFn ToAny(DType to) {
  switch (to) {
    case DType::kBool: return CastLoop<bool, From>;
    case DType::kUInt8: return CastLoop<uint8_t, From>;
    case DType::kInt8: return CastLoop<int8_t, From>;
    case DType::kInt32: return CastLoop<int32_t, From>;
    case DType::kInt64: return CastLoop<int64_t, From>;
    case DType::kFloat32: return CastLoop<float, From>;
    case DType::kFloat64: return CastLoop<double, From>;
    default: return nullptr;
  }
}

}  // namespace

CastFn CastFor(DType from, DType to) {
  switch (from) {
    case DType::kBool: return ToAny<bool>(to);
    case DType::kUInt8: return ToAny<uint8_t>(to);
    case DType::kInt8: return ToAny<int8_t>(to);
    case DType::kInt32: return ToAny<int32_t>(to);
    case DType::kInt64: return ToAny<int64_t>(to);
    case DType::kFloat32: return ToAny<float>(to);
    case DType::kFloat64: return ToAny<double>(to);
    default: return nullptr;
  }
}

namespace {

class CastKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  CastKernel(int in, int out, CastFn fn, int64_t n) : in_(in), out_(out), fn_(fn), n_(n) {}
  absl::Status Run(const ExecContext& ctx) override {
    fn_(ctx.ptrs[in_], 0, 1, ctx.ptrs[out_], n_);
    return absl::OkStatus();
  }

 private:
  int in_, out_;
  CastFn fn_;
  int64_t n_;
};

}  // namespace

std::unique_ptr<CpuKernel> MakeCastKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.op_type != "Cast") return nullptr;
  int in = ctx.SlotOf(node.input(0));
  const int out = ctx.SlotOf(node.output(0));
  if (in < 0 || out < 0 || ctx.slots[in].shape != ctx.slots[out].shape) return nullptr;
  const CastFn fn = CastFor(ctx.slots[in].dtype, ctx.slots[out].dtype);
  if (!fn) return nullptr;
  if (!ctx.slots[in].is_plain()) in = ctx.ReadAs(in, ctx.PlainMd(in));
  return std::make_unique<CastKernel>(in, out, fn, NumElements(ctx.slots[in].shape));
}

}  // namespace kiln::cpu
