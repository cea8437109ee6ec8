#include "runtime/cpu/qlinear.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "runtime/cpu/isa.h"
#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {

using dnnl::memory;

const Tensor* ConstInput(const Node& node, size_t i) {
  const Value* v = node.input(i);
  return v && v->constant ? &*v->constant : nullptr;
}

std::optional<memory::data_type> ByteType(DType t) {
  if (t == DType::kUInt8) return memory::data_type::u8;
  if (t == DType::kInt8) return memory::data_type::s8;
  return std::nullopt;
}

namespace {

bool ReadScalar(const Node& node, size_t i, float* scale) {
  const Tensor* t = ConstInput(node, i);
  if (!t || t->dtype() != DType::kFloat32 || t->numel() != 1) return false;
  *scale = t->data<float>()[0];
  return true;
}

// Zero point input i (absent: 0): a scalar constant.
bool ReadZero(const Node& node, size_t i, int32_t* zero) {
  if (!node.input(i)) return true;
  const Tensor* t = ConstInput(node, i);
  if (!t || t->numel() != 1) return false;
  *zero = static_cast<int32_t>(t->GetDouble(0));
  return true;
}

template <typename T>
void Shift(const void* x, float* y, int64_t begin, int64_t end, int32_t zero) {
  const T* p = static_cast<const T*>(x);
  for (int64_t i = begin; i < end; ++i) y[i] = static_cast<float>(static_cast<int32_t>(p[i]) - zero);
}

// Rows [r0, r1) of `acc` ([rows, channels], channels innermost) requantized into y: the
// reference's double product, rounded half to even by adding and subtracting 1.5 * 2^52
// (exact below 2^51; the product is clamped far inside that first, where it saturates
// anyway), no libm call and no per-element modulo, so the loop vectorizes.
template <typename T>
void Requantize(const float* acc, void* y, int64_t r0, int64_t r1, const std::vector<double>& m,
                int32_t zero) {
  constexpr double lo = std::is_signed_v<T> ? -128.0 : 0.0, hi = lo + 255.0;
  constexpr double kRound = 6755399441055744.0, kFar = 1e12;
  const int64_t channels = static_cast<int64_t>(m.size());
  const double* mul = m.data();
  T* out = static_cast<T*>(y);
  for (int64_t r = r0; r < r1; ++r) {
    const float* a = acc + r * channels;
    T* o = out + r * channels;
    for (int64_t c = 0; c < channels; ++c) {
      double v = static_cast<double>(a[c]) * mul[c];
      v = v < -kFar ? -kFar : (v > kFar ? kFar : v);
      v = (v + kRound) - kRound + zero;
      o[c] = static_cast<T>(v < lo ? lo : (v > hi ? hi : v));
    }
  }
}

}  // namespace

std::optional<QParams> ReadQParams(const Node& node, int64_t out_channels) {
  QParams p;
  if (!ReadScalar(node, 1, &p.x_scale) || !ReadScalar(node, 6, &p.y_scale)) return std::nullopt;
  if (!ReadZero(node, 2, &p.x_zero) || !ReadZero(node, 7, &p.y_zero)) return std::nullopt;
  const Tensor* ws = ConstInput(node, 4);
  if (!ws || ws->dtype() != DType::kFloat32 ||
      (ws->numel() != 1 && ws->numel() != out_channels)) {
    return std::nullopt;
  }
  p.w_scale.assign(ws->data<float>(), ws->data<float>() + ws->numel());
  if (node.input(5)) {
    const Tensor* wz = ConstInput(node, 5);
    if (!wz) return std::nullopt;
    for (int64_t i = 0; i < wz->numel(); ++i) {
      if (wz->GetDouble(i) != 0.0) return std::nullopt;
    }
  }
  return p;
}

std::vector<float> OutputScales(const QParams& p) {
  std::vector<float> m;
  for (float w : p.w_scale) {
    const float ab = p.x_scale * w;
    m.push_back(ab / p.y_scale);
  }
  return m;
}

dnnl::primitive_attr Int8Attr(const QParams& p) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const std::vector<float> scales = OutputScales(p);
  attr.set_output_scales(scales.size() == 1 ? 0 : 1 << 1, scales);
  if (p.x_zero != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {p.x_zero});
  if (p.y_zero != 0) attr.set_zero_points(DNNL_ARG_DST, 0, {p.y_zero});
  return attr;
}

bool Int8ExactOnThisCpu(const Tensor& w, DType x_type) {
  if (HasInt8DotProduct()) return true;
  if (x_type != DType::kUInt8) return false;
  const int8_t* p = w.data<int8_t>();
  for (int64_t i = 0; i < w.numel(); ++i) {
    if (p[i] > 64 || p[i] < -64) return false;
  }
  return true;
}

bool FloatAccumulationExact(const std::vector<double>& abs_sums, const Tensor* bias,
                            DType x_type, int32_t x_zero) {
  const double lo = x_type == DType::kUInt8 ? 0.0 : -128.0;
  const double x_max = std::max(std::fabs(lo - x_zero), std::fabs(lo + 255.0 - x_zero));
  for (size_t c = 0; c < abs_sums.size(); ++c) {
    const double b = bias ? std::fabs(bias->GetDouble(static_cast<int64_t>(c))) : 0.0;
    if (abs_sums[c] * x_max + b > 16777216.0) return false;
  }
  return true;
}

Tensor ToFloat(const Tensor& t) {
  Tensor f(DType::kFloat32, t.shape());
  float* out = f.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = static_cast<float>(t.GetDouble(i));
  return f;
}

void QLinearFloatKernel::SetQuantization(DType x, DType y, const QParams& p, int64_t channels,
                                         int64_t in_elems, int64_t out_elems) {
  x_type_ = x;
  y_type_ = y;
  x_zero_ = p.x_zero;
  y_zero_ = p.y_zero;
  multiplier_.clear();
  for (float m : OutputScales(p)) multiplier_.push_back(m);
  if (multiplier_.size() == 1) multiplier_.assign(channels, multiplier_[0]);
  in_elems_ = in_elems;
  out_elems_ = out_elems;
}

void QLinearFloatKernel::Bind(BuildContext& ctx, int xs, const memory::desc& x_md, int ys,
                              const memory::desc& y_md, const memory::desc& src,
                              const memory::desc& dst, const memory::desc& scratch) {
  x_slot = ctx.ReadAs(xs, x_md);
  y_slot = ctx.WriteAs(ys, y_md);
  xf_slot = ctx.AddTemp(src);
  acc_slot = ctx.AddTemp(dst);
  ctx.NoteScratchpad(scratch);
  product.Arg(DNNL_ARG_SRC, src, xf_slot, ctx.engine);
  product.Arg(DNNL_ARG_DST, dst, acc_slot, ctx.engine);
  product.Arg(DNNL_ARG_SCRATCHPAD, scratch, ctx.scratch_slot, ctx.engine);
}

absl::Status QLinearFloatKernel::Run(const ExecContext& ctx) {
  float* xf = static_cast<float*>(ctx.ptrs[xf_slot]);
  const bool u8x = x_type_ == DType::kUInt8;
  ForEachChunk(in_elems_, in_elems_ >= kParallelElements, 1 << 30,
               [&](int, int64_t b, int64_t e) {
                 u8x ? Shift<uint8_t>(ctx.ptrs[x_slot], xf, b, e, x_zero_)
                     : Shift<int8_t>(ctx.ptrs[x_slot], xf, b, e, x_zero_);
               });
  RETURN_IF_ERROR(product.Execute(ctx));
  const float* acc = static_cast<const float*>(ctx.ptrs[acc_slot]);
  const bool u8y = y_type_ == DType::kUInt8;
  const int64_t rows = out_elems_ / static_cast<int64_t>(multiplier_.size());
  ForEachChunk(rows, out_elems_ >= kParallelElements, 1 << 30, [&](int, int64_t b, int64_t e) {
    u8y ? Requantize<uint8_t>(acc, ctx.ptrs[y_slot], b, e, multiplier_, y_zero_)
        : Requantize<int8_t>(acc, ctx.ptrs[y_slot], b, e, multiplier_, y_zero_);
  });
  return absl::OkStatus();
}

}  // namespace kiln::cpu
