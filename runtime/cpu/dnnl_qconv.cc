// QLinearConv on oneDNN's int8 convolution (VNNI where the CPU has it, AVX2 and AVX-512
// kernels otherwise): uint8/int8 activations, int8 weights with zero point 0 (reordered to
// the primitive's layout once, at build), an int32 bias. ONNX's requantization,
//   y = saturate(round_half_even((acc + bias) * (x_scale * w_scale[c] / y_scale)) + y_zero),
// is oneDNN 2.x's int8 output path: the bias joins the int32 accumulator, the per-channel
// output scale multiplies, the destination zero point adds, and the store rounds to nearest
// even and saturates. The multiplier is the reference's (float32, x_scale * w_scale then
// / y_scale), but oneDNN rounds the product to float32 where the reference keeps it in
// double (ONNX's NumPy definition): a product within float rounding of a .5 tie may land one
// quantum apart, as in ONNX Runtime's MLAS. The warm-up check allows for it (differential.h).
// src and dst are `any`: the primitive picks channels-last; a dst read only by other
// convolutions (or 8-bit element-wise programs) stays in it (BuildContext::WriteAs).
#include <algorithm>
#include <cmath>
#include <optional>

#include "runtime/cpu/build_context.h"
#include "runtime/cpu/conv_geometry.h"
#include "runtime/cpu/isa.h"
#include "runtime/cpu/qlinear.h"

namespace kiln::cpu {
namespace {

using dnnl::memory;

struct QConvSetup {
  dnnl::convolution_forward::primitive_desc pd;
  memory::desc w_plain, b_md;
};

// The convolution's window as oneDNN takes it; nullopt for attributes outside ONNX's rules.
struct QConvWindow {
  memory::dims strides, dilations, pad_begin, pad_end;  // dilations count the gaps
  int64_t group = 1;
};

std::optional<QConvWindow> WindowOf(const Node& node, const Slot& x, const Slot& w, const Slot& y) {
  std::vector<int64_t> in(x.shape.begin() + 2, x.shape.end());
  std::vector<int64_t> out(y.shape.begin() + 2, y.shape.end());
  std::vector<int64_t> ker(w.shape.begin() + 2, w.shape.end());
  std::optional<WindowGeometry> g = ResolveWindow(node, in, out, ker);
  const int64_t group = node.GetInt("group", 1);
  if (!g || group < 1 || w.shape[0] % group != 0) return std::nullopt;
  QConvWindow win{ToDims(g->strides), {}, ToDims(g->pad_begin), ToDims(g->pad_end), group};
  for (int64_t d : g->dilations) win.dilations.push_back(d - 1);  // oneDNN counts the gaps
  return win;
}

std::optional<QConvSetup> CreatePrimitive(BuildContext& ctx, const Node& node, const Slot& x,
                                          const Slot& w, const Slot& y, const QParams& p) {
  std::optional<QConvWindow> g = WindowOf(node, x, w, y);
  if (!g) return std::nullopt;
  QConvSetup s;
  const memory::dims wdims = ConvWeightDims(w.shape, g->group);
  s.w_plain = memory::desc(wdims, memory::data_type::s8, PlainTag(wdims.size()));
  if (node.input(8)) s.b_md = memory::desc({w.shape[0]}, memory::data_type::s32, memory::format_tag::a);
  const dnnl::primitive_attr attr = Int8Attr(p);
  const auto any = memory::format_tag::any;
  try {
    dnnl::convolution_forward::desc d(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        memory::desc(ToDims(x.shape), *ByteType(x.dtype), any),
        memory::desc(wdims, memory::data_type::s8, any), s.b_md,
        memory::desc(ToDims(y.shape), *ByteType(y.dtype), any), g->strides, g->dilations,
        g->pad_begin, g->pad_end);
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

// ---------------------------------------------------------------- the float32 path
// Where the int8 kernels would saturate (qlinear.h): the same integers through oneDNN's
// float32 convolution, channels-last, then the shared requantization.

memory::format_tag ChannelsLast(size_t rank) {
  using tag = memory::format_tag;
  return rank == 3 ? tag::nwc : rank == 4 ? tag::nhwc : tag::ndhwc;
}

std::optional<dnnl::convolution_forward::primitive_desc> FloatPrimitive(
    BuildContext& ctx, const Node& node, const Slot& x, const Slot& w, const Slot& y) {
  std::optional<QConvWindow> g = WindowOf(node, x, w, y);
  if (!g) return std::nullopt;
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
        memory::desc(ConvWeightDims(w.shape, g->group), f32, memory::format_tag::any), b_md,
        memory::desc(ToDims(y.shape), f32, last), g->strides, g->dilations, g->pad_begin,
        g->pad_end);
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
  const Tensor& wq = *ConstInput(node, 3);
  std::vector<double> sums(wq.dim(0), 0.0);  // sum |w| per output channel
  const int64_t per = wq.numel() / wq.dim(0);
  for (int64_t i = 0; i < wq.numel(); ++i) sums[i / per] += std::fabs(wq.GetDouble(i));
  if (!FloatAccumulationExact(sums, bias, x.dtype, p.x_zero)) return nullptr;
  auto pd = FloatPrimitive(ctx, node, x, w, y);
  if (!pd) return nullptr;
  ctx.NoteImplementation(node, pd->impl_info_str());
  const memory::dims wdims = pd->weights_desc().dims();
  absl::StatusOr<memory> wmem =
      PrepackConstant(ctx, ToFloat(*ConstInput(node, 3)),
                      memory::desc(wdims, memory::data_type::f32, PlainTag(wdims.size())),
                      pd->weights_desc());
  if (!wmem.ok()) return nullptr;
  auto k = std::make_unique<QLinearFloatKernel>();
  k->product = DnnlCall(dnnl::convolution_forward(*pd));
  k->product.Owned(DNNL_ARG_WEIGHTS, *wmem);
  if (bias) {
    const memory::desc b_md({w.shape[0]}, memory::data_type::f32, memory::format_tag::a);
    absl::StatusOr<memory> bmem = PrepackConstant(ctx, ToFloat(*bias), b_md, b_md);
    if (!bmem.ok()) return nullptr;
    k->product.Owned(DNNL_ARG_BIAS, *bmem);
  }
  // Slot references die below: Bind grows ctx.slots.
  k->SetQuantization(x.dtype, y.dtype, p, w.shape[0], NumElements(x.shape), NumElements(y.shape));
  const memory::format_tag last = ChannelsLast(x.shape.size());
  const memory::desc x_md(ToDims(x.shape), *ByteType(x.dtype), last);
  const memory::desc y_md(ToDims(y.shape), *ByteType(y.dtype), last);
  k->Bind(ctx, xs, x_md, ys, y_md, pd->src_desc(), pd->dst_desc(), pd->scratchpad_desc());
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
  std::optional<QParams> p = ReadQParams(node, w.shape[0]);
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
