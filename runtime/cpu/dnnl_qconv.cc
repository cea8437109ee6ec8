// QLinearConv on oneDNN's int8 convolution (VNNI where the CPU has it, AVX2 and AVX-512
// kernels otherwise): uint8/int8 activations, int8 weights with zero point 0 (reordered to
// the primitive's layout once, at build), an int32 bias. ONNX's requantization,
//   y = saturate(round_half_even((acc + bias) * (x_scale * w_scale[c] / y_scale)) + y_zero),
// is oneDNN 2.x's int8 output path: the bias joins the int32 accumulator, the per-channel
// output scale multiplies, the destination zero point adds, and the store rounds to nearest
// even and saturates. The multiplier is computed in float32 in the order the reference
// computes it (x_scale * w_scale, then / y_scale), so both round the same product.
// src and dst are `any`: the primitive picks channels-last; a dst read only by other
// convolutions stays in it (BuildContext::WriteAs).
#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>

#include "runtime/cpu/build_context.h"
#include "runtime/cpu/conv_geometry.h"
#include "runtime/cpu/isa.h"
#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {
namespace {

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

// The constant quantization parameters; nullopt when one is not constant, not float32, not
// per tensor where it must be, or when the weights have a non-zero zero point (oneDNN's
// int8 convolution takes none).
struct QParams {
  float x_scale = 1.f, y_scale = 1.f;
  int32_t x_zero = 0, y_zero = 0;
  std::vector<float> w_scale;
};

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

std::optional<QParams> ReadParams(const Node& node, int64_t out_channels) {
  QParams p;
  if (!ReadScalar(node, 1, &p.x_scale) || !ReadScalar(node, 6, &p.y_scale)) return std::nullopt;
  if (!ReadZero(node, 2, &p.x_zero) || !ReadZero(node, 7, &p.y_zero)) return std::nullopt;
  const Tensor* ws = ConstInput(node, 4);
  if (!ws || ws->dtype() != DType::kFloat32 || (ws->numel() != 1 && ws->numel() != out_channels)) {
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

// x_scale * w_scale[c] / y_scale per output channel (or one value), in float32 steps.
std::vector<float> OutputScales(const QParams& p) {
  std::vector<float> m;
  for (float w : p.w_scale) {
    const float ab = p.x_scale * w;
    m.push_back(ab / p.y_scale);
  }
  return m;
}

struct QConvSetup {
  dnnl::convolution_forward::primitive_desc pd;
  memory::desc w_plain, b_md;
};

std::optional<QConvSetup> CreatePrimitive(BuildContext& ctx, const Node& node, const Slot& x,
                                          const Slot& w, const Slot& y, const QParams& p) {
  std::vector<int64_t> in(x.shape.begin() + 2, x.shape.end());
  std::vector<int64_t> out(y.shape.begin() + 2, y.shape.end());
  std::vector<int64_t> ker(w.shape.begin() + 2, w.shape.end());
  std::optional<WindowGeometry> g = ResolveWindow(node, in, out, ker);
  const int64_t group = node.GetInt("group", 1);
  if (!g || group < 1 || w.shape[0] % group != 0) return std::nullopt;
  memory::dims dil;
  for (int64_t d : g->dilations) dil.push_back(d - 1);  // oneDNN counts the gaps
  QConvSetup s;
  const memory::dims wdims = ConvWeightDims(w.shape, group);
  s.w_plain = memory::desc(wdims, memory::data_type::s8, PlainTag(wdims.size()));
  if (node.input(8)) s.b_md = memory::desc({w.shape[0]}, memory::data_type::s32, memory::format_tag::a);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const std::vector<float> scales = OutputScales(p);
  attr.set_output_scales(scales.size() == 1 ? 0 : 1 << 1, scales);
  if (p.x_zero != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {p.x_zero});
  if (p.y_zero != 0) attr.set_zero_points(DNNL_ARG_DST, 0, {p.y_zero});
  const auto any = memory::format_tag::any;
  try {
    dnnl::convolution_forward::desc d(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        memory::desc(ToDims(x.shape), *ByteType(x.dtype), any),
        memory::desc(wdims, memory::data_type::s8, any), s.b_md,
        memory::desc(ToDims(y.shape), *ByteType(y.dtype), any), ToDims(g->strides), dil,
        ToDims(g->pad_begin), ToDims(g->pad_end));
    s.pd = dnnl::convolution_forward::primitive_desc(d, attr, ctx.engine);
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
  return s;
}

class QConvKernel : public CpuKernel {
 public:
  explicit QConvKernel(DnnlCall call) : call_(std::move(call)) {}
  absl::Status Run(const ExecContext& ctx) override { return call_.Execute(ctx); }
  DnnlCall& call() { return call_; }

 private:
  DnnlCall call_;
};

// What the kernel handles: int8/uint8 activation and output of rank 3..5, constant int8
// weights, a constant int32 bias (or none), nothing empty.
bool Supported(const Node& node, const Slot& x, const Slot& w, const Slot& y) {
  if (!node.domain.empty() || node.op_type != "QLinearConv") return false;
  if (!ByteType(x.dtype) || !ByteType(y.dtype) || w.dtype != DType::kInt8) return false;
  if (!ConstInput(node, 3)) return false;
  const Tensor* b = node.input(8) ? ConstInput(node, 8) : nullptr;
  if (node.input(8) && (!b || b->dtype() != DType::kInt32)) return false;
  for (const Slot* s : {&x, &w, &y}) {
    if (s->shape.size() < 3 || s->shape.size() > 5 || NumElements(s->shape) == 0) return false;
  }
  return true;
}

// Whether oneDNN's int8 kernels on this CPU multiply with a 32-bit dot product (VNNI: every
// avx512_core_* level above plain avx512_core, avx2_vnni). Without it they pair u8 x s8
// products into a saturating 16-bit sum (vpmaddubsw), exact only while
// 255 * (|w_a| + |w_b|) <= 32767, and they halve the weights of an int8 source.
bool HasInt8DotProduct() {
  const std::string& isa = CpuIsa().onednn;
  return isa.find("vnni") != std::string::npos ||
         (isa.rfind("avx512_core_", 0) == 0 && isa != "avx512_core");
}

// Whether oneDNN's int8 result is exact for these operands on this CPU (HasInt8DotProduct).
bool Int8ExactOnThisCpu(const Tensor& w, DType x_type) {
  if (HasInt8DotProduct()) return true;
  if (x_type != DType::kUInt8) return false;
  const int8_t* p = w.data<int8_t>();
  for (int64_t i = 0; i < w.numel(); ++i) {
    if (p[i] > 64 || p[i] < -64) return false;
  }
  return true;
}

// ---------------------------------------------------------------- the float32 path
// Where the int8 kernels would saturate (no VNNI, 8-bit weights): the same integers through
// oneDNN's float32 convolution, channels-last. Every product and partial sum is an integer;
// while each output channel's sum |w| * max|x - zx| + |bias| stays within 2^24 float32 holds
// them exactly, so the accumulator equals the int32 one, and the requantization is the
// reference's own arithmetic (double product, round half to even, saturate).

memory::format_tag ChannelsLast(size_t rank) {
  using tag = memory::format_tag;
  return rank == 3 ? tag::nwc : rank == 4 ? tag::nhwc : tag::ndhwc;
}

// Whether float32 accumulation is exact for these operands (see above).
bool FloatExact(const Tensor& w, const Tensor* bias, DType x_type, int32_t x_zero) {
  const double lo = x_type == DType::kUInt8 ? 0.0 : -128.0;
  const double x_max = std::max(std::fabs(lo - x_zero), std::fabs(lo + 255.0 - x_zero));
  const int64_t oc = w.dim(0), per = w.numel() / oc;
  const int8_t* p = w.data<int8_t>();
  for (int64_t c = 0; c < oc; ++c) {
    double sum = 0;
    for (int64_t i = 0; i < per; ++i) sum += std::abs(static_cast<int>(p[c * per + i]));
    const double b = bias ? std::fabs(bias->GetDouble(c)) : 0.0;
    if (sum * x_max + b > 16777216.0) return false;
  }
  return true;
}

Tensor ToFloat(const Tensor& t) {
  Tensor f(DType::kFloat32, t.shape());
  float* out = f.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = static_cast<float>(t.GetDouble(i));
  return f;
}

class QConvFloatKernel : public CpuKernel {
 public:
  absl::Status Run(const ExecContext& ctx) override;

  DnnlCall conv;
  int x_slot = -1, xf_slot = -1, acc_slot = -1, y_slot = -1;
  DType x_type = DType::kUInt8, y_type = DType::kUInt8;
  int32_t x_zero = 0, y_zero = 0;
  std::vector<double> multiplier;  // per output channel, as float32 values
  int64_t in_elems = 0, out_elems = 0;
};

template <typename T>
void Shift(const void* x, float* y, int64_t begin, int64_t end, int32_t zero) {
  const T* p = static_cast<const T*>(x);
  for (int64_t i = begin; i < end; ++i) y[i] = static_cast<float>(static_cast<int32_t>(p[i]) - zero);
}

template <typename T>
void Requantize(const float* acc, void* y, int64_t begin, int64_t end,
                const std::vector<double>& m, int32_t zero) {
  constexpr double lo = std::is_signed_v<T> ? -128.0 : 0.0, hi = lo + 255.0;
  const int64_t channels = static_cast<int64_t>(m.size());
  T* out = static_cast<T*>(y);
  for (int64_t i = begin; i < end; ++i) {
    const double v = std::nearbyint(static_cast<double>(acc[i]) * m[i % channels]) + zero;
    out[i] = static_cast<T>(std::min(hi, std::max(lo, v)));
  }
}

absl::Status QConvFloatKernel::Run(const ExecContext& ctx) {
  float* xf = static_cast<float*>(ctx.ptrs[xf_slot]);
  const bool u8x = x_type == DType::kUInt8;
  ForEachChunk(in_elems, in_elems >= kParallelElements, 1 << 30, [&](int, int64_t b, int64_t e) {
    u8x ? Shift<uint8_t>(ctx.ptrs[x_slot], xf, b, e, x_zero)
        : Shift<int8_t>(ctx.ptrs[x_slot], xf, b, e, x_zero);
  });
  RETURN_IF_ERROR(conv.Execute(ctx));
  const float* acc = static_cast<const float*>(ctx.ptrs[acc_slot]);
  const bool u8y = y_type == DType::kUInt8;
  ForEachChunk(out_elems, out_elems >= kParallelElements, 1 << 30, [&](int, int64_t b, int64_t e) {
    u8y ? Requantize<uint8_t>(acc, ctx.ptrs[y_slot], b, e, multiplier, y_zero)
        : Requantize<int8_t>(acc, ctx.ptrs[y_slot], b, e, multiplier, y_zero);
  });
  return absl::OkStatus();
}

std::optional<dnnl::convolution_forward::primitive_desc> FloatPrimitive(
    BuildContext& ctx, const Node& node, const Slot& x, const Slot& w, const Slot& y) {
  std::vector<int64_t> in(x.shape.begin() + 2, x.shape.end());
  std::vector<int64_t> out(y.shape.begin() + 2, y.shape.end());
  std::vector<int64_t> ker(w.shape.begin() + 2, w.shape.end());
  std::optional<WindowGeometry> g = ResolveWindow(node, in, out, ker);
  const int64_t group = node.GetInt("group", 1);
  if (!g || group < 1 || w.shape[0] % group != 0) return std::nullopt;
  memory::dims dil;
  for (int64_t d : g->dilations) dil.push_back(d - 1);
  const auto f32 = memory::data_type::f32;
  const memory::format_tag last = ChannelsLast(x.shape.size());
  memory::desc b_md;
  if (node.input(8)) b_md = memory::desc({w.shape[0]}, f32, memory::format_tag::a);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  try {
    dnnl::convolution_forward::desc d(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        memory::desc(ToDims(x.shape), f32, last),
        memory::desc(ConvWeightDims(w.shape, group), f32, memory::format_tag::any), b_md,
        memory::desc(ToDims(y.shape), f32, last), ToDims(g->strides), dil, ToDims(g->pad_begin),
        ToDims(g->pad_end));
    dnnl::convolution_forward::primitive_desc pd(d, attr, ctx.engine);
    if (IsReferenceImpl(pd.impl_info_str())) return std::nullopt;
    return pd;
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

std::unique_ptr<CpuKernel> MakeFloatPath(BuildContext& ctx, const Node& node, int xs, int ys,
                                         const QParams& p) {
  const Slot &x = ctx.slots[xs], &y = ctx.slots[ctx.SlotOf(node.output(0))];
  const Slot& w = ctx.slots[ctx.SlotOf(node.input(3))];
  const Tensor* bias = node.input(8) ? ConstInput(node, 8) : nullptr;
  if (!FloatExact(*ConstInput(node, 3), bias, x.dtype, p.x_zero)) return nullptr;
  auto pd = FloatPrimitive(ctx, node, x, w, y);
  if (!pd) return nullptr;
  ctx.NoteImplementation(node, pd->impl_info_str());
  const int64_t group = node.GetInt("group", 1);
  const memory::dims wdims = ConvWeightDims(w.shape, group);
  absl::StatusOr<memory> wmem =
      PrepackConstant(ctx, ToFloat(*ConstInput(node, 3)),
                      memory::desc(wdims, memory::data_type::f32, PlainTag(wdims.size())),
                      pd->weights_desc());
  if (!wmem.ok()) return nullptr;
  auto k = std::make_unique<QConvFloatKernel>();
  k->conv = DnnlCall(dnnl::convolution_forward(*pd));
  k->conv.Owned(DNNL_ARG_WEIGHTS, *wmem);
  if (bias) {
    const memory::desc b_md({w.shape[0]}, memory::data_type::f32, memory::format_tag::a);
    absl::StatusOr<memory> bmem = PrepackConstant(ctx, ToFloat(*bias), b_md, b_md);
    if (!bmem.ok()) return nullptr;
    k->conv.Owned(DNNL_ARG_BIAS, *bmem);
  }
  const memory::format_tag last = ChannelsLast(x.shape.size());
  k->x_slot = ctx.ReadAs(xs, memory::desc(ToDims(x.shape), *ByteType(x.dtype), last));
  k->y_slot = ctx.WriteAs(ys, memory::desc(ToDims(y.shape), *ByteType(y.dtype), last));
  k->xf_slot = ctx.AddTemp(pd->src_desc());
  k->acc_slot = ctx.AddTemp(pd->dst_desc());
  ctx.NoteScratchpad(pd->scratchpad_desc());
  k->conv.Arg(DNNL_ARG_SRC, pd->src_desc(), k->xf_slot, ctx.engine);
  k->conv.Arg(DNNL_ARG_DST, pd->dst_desc(), k->acc_slot, ctx.engine);
  k->conv.Arg(DNNL_ARG_SCRATCHPAD, pd->scratchpad_desc(), ctx.scratch_slot, ctx.engine);
  k->x_type = x.dtype;
  k->y_type = y.dtype;
  k->x_zero = p.x_zero;
  k->y_zero = p.y_zero;
  for (float m : OutputScales(p)) k->multiplier.push_back(m);
  if (k->multiplier.size() == 1) k->multiplier.assign(w.shape[0], k->multiplier[0]);
  k->in_elems = NumElements(x.shape);
  k->out_elems = NumElements(y.shape);
  return k;
}

}  // namespace

std::unique_ptr<CpuKernel> MakeDnnlQConv(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.op_type != "QLinearConv") return nullptr;
  const int xs = ctx.SlotOf(node.input(0)), ws = ctx.SlotOf(node.input(3));
  const int ys = ctx.SlotOf(node.output(0));
  if (xs < 0 || ws < 0 || ys < 0) return nullptr;
  const Slot &x = ctx.slots[xs], &w = ctx.slots[ws], &y = ctx.slots[ys];
  if (!Supported(node, x, w, y)) return nullptr;
  std::optional<QParams> p = ReadParams(node, w.shape[0]);
  if (!p) return nullptr;
  // The int8 kernels would saturate: the float32 path (exact within its bound, else the
  // node runs on the reference kernel, a fallback op).
  if (!Int8ExactOnThisCpu(*ConstInput(node, 3), x.dtype)) return MakeFloatPath(ctx, node, xs, ys, *p);
  std::optional<QConvSetup> s = CreatePrimitive(ctx, node, x, w, y, *p);
  if (!s) return nullptr;
  ctx.NoteImplementation(node, s->pd.impl_info_str());
  const auto& pd = s->pd;
  absl::StatusOr<memory> wmem = PrepackConstant(ctx, *ConstInput(node, 3), s->w_plain,
                                                pd.weights_desc());
  if (!wmem.ok()) return nullptr;
  auto k = std::make_unique<QConvKernel>(DnnlCall(dnnl::convolution_forward(pd)));
  k->call().Owned(DNNL_ARG_WEIGHTS, *wmem);
  if (node.input(8)) {
    absl::StatusOr<memory> bmem = PrepackConstant(ctx, *ConstInput(node, 8), s->b_md, s->b_md);
    if (!bmem.ok()) return nullptr;
    k->call().Owned(DNNL_ARG_BIAS, *bmem);
  }
  // Layout decisions last: they queue reorders and may move the output to the blocked arena.
  const int src = ctx.ReadAs(xs, pd.src_desc());
  const int dst = ctx.WriteAs(ys, pd.dst_desc());
  ctx.NoteScratchpad(pd.scratchpad_desc());
  k->call().Arg(DNNL_ARG_SRC, pd.src_desc(), src, ctx.engine);
  k->call().Arg(DNNL_ARG_DST, pd.dst_desc(), dst, ctx.engine);
  k->call().Arg(DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc(), ctx.scratch_slot, ctx.engine);
  return k;
}

}  // namespace kiln::cpu
