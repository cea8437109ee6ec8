// QuantizeLinear (float32 -> uint8/int8/uint16/int16) and DequantizeLinear (those types and
// int32 -> float32) with float32 scales, bit-identical to the reference (quantize_math.h):
//  - per tensor: a one-element scale and zero point;
//  - per axis: a 1-D scale (and zero point) along `axis`; the loop runs along the spans that
//    share one scale (or, for the last axis, with the scale row beside the data).
// Constant parameters are read at build; run-time ones (ONNX's node tests feed them as
// inputs) are copied from their slots into buffers of the kernel on each run.
// Blocked scales, float8/int4 types, float16/double scales or data and `precision` other than
// float32 stay with the reference kernel (as does every malformed node: the reference reports
// it). int32 data dequantizes in double, as the reference does (x - zero may not be exact in
// float).
#include <cstring>

#include "runtime/cpu/isa.h"
#include "runtime/cpu/own_kernels.h"
#include "runtime/cpu/quantize_math.h"

namespace kiln::cpu {
namespace {

// Quantize n floats into y (a T per element); the scale and zero point are one value (kRow
// false) or one per element (kRow true).
template <class T, bool kRow>
KILN_ISA_BODY void QuantizeLoop(const float* x, const float* s, const float* z, float lo, float hi,
                                T* y, int64_t n) {
  if constexpr (kRow) {
    for (int64_t i = 0; i < n; ++i) {
      y[i] = static_cast<T>(static_cast<int32_t>(qmath::Quantize(x[i], s[i], z[i], lo, hi)));
    }
  } else {
    const float sv = *s, zv = *z;
    for (int64_t i = 0; i < n; ++i) {
      y[i] = static_cast<T>(static_cast<int32_t>(qmath::Quantize(x[i], sv, zv, lo, hi)));
    }
  }
}

template <bool kRow>
KILN_ISA_BODY void QuantizeTyped(DType t, const float* x, const float* s, const float* z, float lo,
                                 float hi, void* y, int64_t n) {
  switch (t) {
    case DType::kUInt8: QuantizeLoop<uint8_t, kRow>(x, s, z, lo, hi, static_cast<uint8_t*>(y), n); break;
    case DType::kInt8: QuantizeLoop<int8_t, kRow>(x, s, z, lo, hi, static_cast<int8_t*>(y), n); break;
    case DType::kUInt16: QuantizeLoop<uint16_t, kRow>(x, s, z, lo, hi, static_cast<uint16_t*>(y), n); break;
    default: QuantizeLoop<int16_t, kRow>(x, s, z, lo, hi, static_cast<int16_t*>(y), n); break;
  }
}

KILN_ISA_BODY void QuantizeSpanBody(DType t, bool row, const float* x, const float* s,
                                    const float* z, float lo, float hi, void* y, int64_t n) {
  if (row) {
    QuantizeTyped<true>(t, x, s, z, lo, hi, y, n);
  } else {
    QuantizeTyped<false>(t, x, s, z, lo, hi, y, n);
  }
}
KILN_ISA_VERSIONS(void, QuantizeSpan,
                  (DType t, bool row, const float* x, const float* s, const float* z, float lo,
                   float hi, void* y, int64_t n),
                  (t, row, x, s, z, lo, hi, y, n))

template <class T, bool kRow>
KILN_ISA_BODY void DequantizeLoop(const T* x, const float* s, const float* z, float* y, int64_t n) {
  if constexpr (kRow) {
    for (int64_t i = 0; i < n; ++i) y[i] = qmath::Dequantize(static_cast<float>(x[i]), s[i], z[i]);
  } else {
    const float sv = *s, zv = *z;
    for (int64_t i = 0; i < n; ++i) y[i] = qmath::Dequantize(static_cast<float>(x[i]), sv, zv);
  }
}

// int32: (x - zero) * scale in double, rounded to float once, as the reference computes it.
template <bool kRow>
KILN_ISA_BODY void DequantizeLoop32(const int32_t* x, const float* s, const double* z, float* y,
                                    int64_t n) {
  if constexpr (kRow) {
    for (int64_t i = 0; i < n; ++i) {
      y[i] = static_cast<float>((static_cast<double>(x[i]) - z[i]) * static_cast<double>(s[i]));
    }
  } else {
    const double sv = *s, zv = *z;
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>((static_cast<double>(x[i]) - zv) * sv);
  }
}

template <bool kRow>
KILN_ISA_BODY void DequantizeTyped(DType t, const void* x, const float* s, const float* z,
                                   const double* zd, float* y, int64_t n) {
  switch (t) {
    case DType::kUInt8: DequantizeLoop<uint8_t, kRow>(static_cast<const uint8_t*>(x), s, z, y, n); break;
    case DType::kInt8: DequantizeLoop<int8_t, kRow>(static_cast<const int8_t*>(x), s, z, y, n); break;
    case DType::kUInt16: DequantizeLoop<uint16_t, kRow>(static_cast<const uint16_t*>(x), s, z, y, n); break;
    case DType::kInt16: DequantizeLoop<int16_t, kRow>(static_cast<const int16_t*>(x), s, z, y, n); break;
    default: DequantizeLoop32<kRow>(static_cast<const int32_t*>(x), s, zd, y, n); break;
  }
}

KILN_ISA_BODY void DequantizeSpanBody(DType t, bool row, const void* x, const float* s,
                                      const float* z, const double* zd, float* y, int64_t n) {
  if (row) {
    DequantizeTyped<true>(t, x, s, z, zd, y, n);
  } else {
    DequantizeTyped<false>(t, x, s, z, zd, y, n);
  }
}
KILN_ISA_VERSIONS(void, DequantizeSpan,
                  (DType t, bool row, const void* x, const float* s, const float* z,
                   const double* zd, float* y, int64_t n),
                  (t, row, x, s, z, zd, y, n))

bool IsDequantizable(DType t) {
  float lo, hi;
  return qmath::Range(t, &lo, &hi) || t == DType::kInt32;
}

// Element i of a plain zero-point slot, as double (exact for every type the kernel reads).
double ReadZero(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kUInt8: return static_cast<const uint8_t*>(p)[i];
    case DType::kInt8: return static_cast<const int8_t*>(p)[i];
    case DType::kUInt16: return static_cast<const uint16_t*>(p)[i];
    case DType::kInt16: return static_cast<const int16_t*>(p)[i];
    default: return static_cast<const int32_t*>(p)[i];
  }
}

struct QuantSpec {
  bool quantize = false;
  DType qtype = DType::kUndefined;  // the integer side's type
  int x = -1, y = -1;
  // Parameters fed at run time: their slots (zero_slot -1 when the zero point is omitted),
  // copied into the buffers below on each run.
  int scale_slot = -1, zero_slot = -1;
  // One value (per tensor) or one per index along the axis: the constants, or buffers of
  // that size for run-time parameters (allocated at build).
  std::vector<float> scale, zero;
  std::vector<double> zero_d;
  int64_t n = 0, channels = 1, inner = 1;  // per axis: [outer, channels, inner]
  float lo = 0.f, hi = 0.f;
};

class QuantizeKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  explicit QuantizeKernel(QuantSpec spec) : q_(std::move(spec)) {}

  absl::Status Run(const ExecContext& ctx) override {
    if (q_.n == 0) return absl::OkStatus();
    if (q_.scale_slot >= 0) {
      const int64_t m = static_cast<int64_t>(q_.scale.size());
      std::memcpy(q_.scale.data(), ctx.ptrs[q_.scale_slot], m * sizeof(float));
      for (int64_t i = 0; q_.zero_slot >= 0 && i < m; ++i) {
        q_.zero_d[i] = ReadZero(ctx.ptrs[q_.zero_slot], q_.qtype, i);
        q_.zero[i] = static_cast<float>(q_.zero_d[i]);  // exact for 8/16-bit (int32 uses zero_d)
      }
    }
    const float *s = q_.scale.data(), *z = q_.zero.data();
    const double* zd = q_.zero_d.data();
    const void* x = ctx.ptrs[q_.x];
    void* y = ctx.ptrs[q_.y];
    const size_t xs = DTypeSize(q_.quantize ? DType::kFloat32 : q_.qtype);
    const size_t ys = DTypeSize(q_.quantize ? q_.qtype : DType::kFloat32);
    auto span = [&](int64_t i, bool row, int64_t c, int64_t len) {
      const void* xi = static_cast<const char*>(x) + i * xs;
      void* yi = static_cast<char*>(y) + i * ys;
      if (q_.quantize) {
        QuantizeSpan(q_.qtype, row, static_cast<const float*>(xi), s + c, z + c, q_.lo, q_.hi, yi, len);
      } else {
        DequantizeSpan(q_.qtype, row, xi, s + c, z + c, zd + c, static_cast<float*>(yi), len);
      }
    };
    const bool per_axis = q_.scale.size() > 1;
    ForEachChunk(q_.n, q_.n >= kParallelElements, omp_get_max_threads(),
                 [&](int, int64_t begin, int64_t end) {
                   if (!per_axis) {
                     span(begin, false, 0, end - begin);
                     return;
                   }
                   for (int64_t i = begin; i < end;) {
                     if (q_.inner == 1) {  // the axis is innermost: the scale row runs beside
                       const int64_t c = i % q_.channels;
                       const int64_t len = std::min(end - i, q_.channels - c);
                       span(i, true, c, len);
                       i += len;
                     } else {  // a run of `inner` elements shares one scale
                       const int64_t r = i / q_.inner;
                       const int64_t len = std::min(end, (r + 1) * q_.inner) - i;
                       span(i, false, r % q_.channels, len);
                       i += len;
                     }
                   }
                 });
    return absl::OkStatus();
  }

 private:
  QuantSpec q_;
};

// A one-element parameter (per tensor): rank 0 or 1.
bool OneElement(const std::vector<int64_t>& shape) { return shape.size() <= 1 && NumElements(shape) == 1; }

}  // namespace

std::unique_ptr<CpuKernel> MakeQuantizeKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.outputs.size() != 1) return nullptr;
  const bool quantize = node.op_type == "QuantizeLinear";
  if (!quantize && node.op_type != "DequantizeLinear") return nullptr;
  if (node.inputs.size() < 2 || node.inputs.size() > 3 || !node.input(0) || !node.input(1)) {
    return nullptr;
  }
  const Value* zv = node.inputs.size() > 2 ? node.input(2) : nullptr;
  QuantSpec q;
  q.quantize = quantize;
  q.x = ctx.SlotOf(node.input(0));
  q.y = ctx.SlotOf(node.output(0));
  const int s_slot = ctx.SlotOf(node.input(1));
  const int z_slot = zv ? ctx.SlotOf(zv) : -1;
  if (q.x < 0 || q.y < 0 || s_slot < 0 || (zv && z_slot < 0)) return nullptr;
  const Slot &xs = ctx.slots[q.x], &ys = ctx.slots[q.y], &ss = ctx.slots[s_slot];
  if (xs.shape != ys.shape || ss.dtype != DType::kFloat32) return nullptr;
  if (quantize) {
    q.qtype = ys.dtype;
    if (xs.dtype != DType::kFloat32 || !qmath::Range(q.qtype, &q.lo, &q.hi)) return nullptr;
    const int64_t prec = node.GetInt("precision", 0);
    if (prec != 0 && prec != static_cast<int64_t>(DType::kFloat32)) return nullptr;
  } else {
    q.qtype = xs.dtype;
    if (ys.dtype != DType::kFloat32 || !IsDequantizable(q.qtype)) return nullptr;
  }
  const int64_t out_attr = node.GetInt("output_dtype", 0);
  if (out_attr != 0 && out_attr != static_cast<int64_t>(ys.dtype)) return nullptr;
  if (zv && ctx.slots[z_slot].dtype != q.qtype) return nullptr;
  q.n = NumElements(xs.shape);

  const std::vector<int64_t>& sshape = ss.shape;
  const bool per_tensor = OneElement(sshape);
  if (zv && !(per_tensor ? OneElement(ctx.slots[z_slot].shape) : ctx.slots[z_slot].shape == sshape)) {
    return nullptr;  // the reference reports the misfit
  }
  if (!per_tensor) {
    const int64_t rank = static_cast<int64_t>(xs.shape.size());
    int64_t axis = node.GetInt("axis", 1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank || node.GetInt("block_size", 0) > 0 || sshape.size() != 1 ||
        sshape[0] != xs.shape[axis]) {
      return nullptr;
    }
    q.channels = xs.shape[axis];
    q.inner = NumElements(std::vector<int64_t>(xs.shape.begin() + axis + 1, xs.shape.end()));
  }
  const int64_t m = NumElements(sshape);
  q.scale.assign(m, 0.f);
  q.zero.assign(m, 0.f);
  q.zero_d.assign(m, 0.0);
  const Value* sv = node.input(1);
  if (sv->is_constant() && (!zv || zv->is_constant())) {
    std::memcpy(q.scale.data(), sv->constant->raw(), m * sizeof(float));
    for (int64_t i = 0; zv && i < m; ++i) q.zero_d[i] = zv->constant->GetDouble(i);
    q.zero.assign(q.zero_d.begin(), q.zero_d.end());
  } else {
    if (!ss.is_plain() || (zv && !ctx.slots[z_slot].is_plain())) return nullptr;
    q.scale_slot = s_slot;
    q.zero_slot = z_slot;
  }
  if (!xs.is_plain()) q.x = ctx.ReadAs(q.x, ctx.PlainMd(q.x));
  return std::make_unique<QuantizeKernel>(std::move(q));
}

}  // namespace kiln::cpu
