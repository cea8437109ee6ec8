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
#include <optional>

#include "runtime/cpu/build_context.h"
#include "runtime/cpu/conv_geometry.h"
#include "runtime/cpu/isa.h"

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

// Whether oneDNN's result is exact for these operands on this CPU (see HasInt8DotProduct).
bool ExactOnThisCpu(const Tensor& w, DType x_type) {
  if (HasInt8DotProduct()) return true;
  if (x_type != DType::kUInt8) return false;
  const int8_t* p = w.data<int8_t>();
  for (int64_t i = 0; i < w.numel(); ++i) {
    if (p[i] > 64 || p[i] < -64) return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<CpuKernel> MakeDnnlQConv(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.op_type != "QLinearConv") return nullptr;
  const int xs = ctx.SlotOf(node.input(0)), ws = ctx.SlotOf(node.input(3));
  const int ys = ctx.SlotOf(node.output(0));
  if (xs < 0 || ws < 0 || ys < 0) return nullptr;
  const Slot &x = ctx.slots[xs], &w = ctx.slots[ws], &y = ctx.slots[ys];
  if (!Supported(node, x, w, y)) return nullptr;
  // Inexact there: the node runs on the reference kernel (a fallback op, reported).
  if (!ExactOnThisCpu(*ConstInput(node, 3), x.dtype)) return nullptr;
  std::optional<QParams> p = ReadParams(node, w.shape[0]);
  if (!p) return nullptr;
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
