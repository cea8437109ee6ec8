// Conv and ai.kiln.FusedConv on oneDNN's convolution_forward. src and dst are created with
// format `any` so the primitive picks its preferred (blocked) layout; weights are reordered
// to the primitive's layout once, at build. Epilogue activations become eltwise post-ops; a
// residual Add becomes the `sum` post-op, which adds what dst held before the primitive ran,
// so the residual is reordered/copied into the dst buffer first.
#include <cstring>

#include "compiler/ir/kiln_ops.h"
#include "runtime/cpu/build_context.h"
#include "runtime/cpu/conv_geometry.h"
#include "runtime/cpu/dnnl_post_ops.h"
#include "runtime/cpu/isa.h"

namespace kiln::cpu {
namespace {

using dnnl::memory;

class ConvKernel : public CpuKernel {
 public:
  absl::Status Run(const ExecContext& ctx) override {
    if (residual_) RETURN_IF_ERROR(residual_->Run(ctx));
    return call_.Execute(ctx);
  }
  DnnlCall call_;
  std::unique_ptr<CpuKernel> residual_;  // copies the residual into dst before the sum
};

// The post-op chain; sets *residual_value to the Add step's input. false if unsupported.
bool BuildPostOps(const Node& node, dnnl::post_ops& po, const Value** residual_value) {
  *residual_value = nullptr;
  if (node.domain != kKilnDomain) return true;
  std::vector<kiln_ops::EpilogueStep> steps = kiln_ops::ReadEpilogue(node);
  for (const auto& s : steps) {
    if (s.op == "Add") {
      if (*residual_value) return false;  // one sum post-op only
      *residual_value = node.input(3);
      if (!*residual_value) return false;
      po.append_sum(1.f);
    } else if (!AppendActivation(po, s)) {
      return false;
    }
  }
  return true;
}

memory::dims WeightDims(const std::vector<int64_t>& w, int64_t group) {
  if (group == 1) return ToDims(w);
  memory::dims d = {group, w[0] / group};
  d.insert(d.end(), w.begin() + 1, w.end());
  return d;
}

struct ConvShapes {
  const Slot* x;
  const Slot* w;
  const Slot* y;
};

// Checks what the kernel handles: f32, constant weights and bias, rank 3..5, nonempty.
bool Supported(const Node& node, const ConvShapes& s) {
  if (!node.input(0) || !node.input(1) || !node.output(0)) return false;
  if (!node.input(1)->is_constant()) return false;
  if (node.input(2) && !node.input(2)->is_constant()) return false;
  for (const Slot* p : {s.x, s.w, s.y}) {
    if (p->dtype != DType::kFloat32 || p->shape.size() < 3 || p->shape.size() > 5) return false;
    if (NumElements(p->shape) == 0) return false;
  }
  return true;
}

// The blocked tag for an activation of this rank (`any` when there is none), with the channel
// block of the ISA oneDNN dispatches: 16 on AVX-512, 8 below (oneDNN has no AVX2 kernels for
// 16-channel blocks and would run its reference convolution on them).
memory::format_tag BlockedTag(size_t rank) {
  const bool b16 = CpuIsa().channel_block == 16;
  switch (rank) {
    case 3: return b16 ? memory::format_tag::nCw16c : memory::format_tag::nCw8c;
    case 4: return b16 ? memory::format_tag::nChw16c : memory::format_tag::nChw8c;
    case 5: return b16 ? memory::format_tag::nCdhw16c : memory::format_tag::nCdhw8c;
    default: return memory::format_tag::any;
  }
}

struct ConvPrimitive {
  dnnl::convolution_forward::primitive_desc pd;
  memory::desc w_plain, b_md;
};

// The primitive for this node's geometry, src/dst/weights in `any` layout; nullopt when the
// attributes are outside what oneDNN takes or oneDNN has no implementation.
std::optional<ConvPrimitive> CreatePrimitive(BuildContext& ctx, const Node& node,
                                             const ConvShapes& sh, const dnnl::post_ops& po,
                                             bool block) {
  std::vector<int64_t> in(sh.x->shape.begin() + 2, sh.x->shape.end());
  std::vector<int64_t> out(sh.y->shape.begin() + 2, sh.y->shape.end());
  std::vector<int64_t> ker(sh.w->shape.begin() + 2, sh.w->shape.end());
  std::optional<WindowGeometry> g = ResolveWindow(node, in, out, ker);
  const int64_t group = node.GetInt("group", 1);
  if (!g || group < 1 || sh.w->shape[0] % group != 0) return std::nullopt;
  memory::dims dil;
  for (int64_t d : g->dilations) dil.push_back(d - 1);  // oneDNN counts the gaps
  const auto f32 = memory::data_type::f32;
  const auto any = memory::format_tag::any;
  // Blocked: 16-channel blocks for the activations. The source of a layer with under 8
  // channels (an image's RGB) stays the primitive's choice: blocking 3 channels to 16 would
  // multiply its reads.
  const memory::format_tag blocked = BlockedTag(sh.x->shape.size());
  block = block && blocked != any;
  const memory::format_tag src_tag = block && sh.x->shape[1] >= 8 ? blocked : any;
  const memory::format_tag dst_tag = block ? blocked : any;
  ConvPrimitive c;
  memory::dims wdims = WeightDims(sh.w->shape, group);
  c.w_plain = memory::desc(wdims, f32, PlainTag(wdims.size()));
  if (node.input(2)) c.b_md = memory::desc({sh.w->shape[0]}, f32, memory::format_tag::a);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_post_ops(po);
  try {
    dnnl::convolution_forward::desc d(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        memory::desc(ToDims(sh.x->shape), f32, src_tag), memory::desc(wdims, f32, any), c.b_md,
        memory::desc(ToDims(sh.y->shape), f32, dst_tag), ToDims(g->strides), dil,
        ToDims(g->pad_begin), ToDims(g->pad_end));
    c.pd = dnnl::convolution_forward::primitive_desc(d, attr, ctx.engine);
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
  return c;
}

}  // namespace

std::unique_ptr<CpuKernel> MakeDnnlConv(BuildContext& ctx, const Node& node) {
  const bool fused = node.domain == kKilnDomain && node.op_type == "FusedConv";
  if (!fused && !(node.domain.empty() && node.op_type == "Conv")) return nullptr;
  const int xs = ctx.SlotOf(node.input(0)), ws = ctx.SlotOf(node.input(1));
  const int ys = ctx.SlotOf(node.output(0));
  if (xs < 0 || ws < 0 || ys < 0) return nullptr;
  ConvShapes sh{&ctx.slots[xs], &ctx.slots[ws], &ctx.slots[ys]};
  if (!Supported(node, sh)) return nullptr;
  dnnl::post_ops po;
  const Value* residual = nullptr;
  if (!BuildPostOps(node, po, &residual)) return nullptr;
  const int rs = ctx.SlotOf(residual);
  if (residual && (rs < 0 || ctx.slots[rs].shape != sh.y->shape ||
                   ctx.slots[rs].dtype != DType::kFloat32)) {
    return nullptr;
  }
  // Never a reference implementation where a JIT one exists: a blocked layout oneDNN has
  // no kernel for on this CPU falls back to the primitive's own choice of layout.
  const bool blocked = ctx.layout == ActivationLayout::kBlocked;
  std::optional<ConvPrimitive> c = CreatePrimitive(ctx, node, sh, po, blocked);
  if (blocked && c && IsReferenceImpl(c->pd.impl_info_str())) {
    c = CreatePrimitive(ctx, node, sh, po, false);
  }
  if (!c) return nullptr;
  ctx.NoteImplementation(node, c->pd.impl_info_str());
  const auto& pd = c->pd;
  absl::StatusOr<memory> wmem = PrepackConstant(ctx, *node.input(1)->constant, c->w_plain,
                                                pd.weights_desc());
  if (!wmem.ok()) return nullptr;
  auto k = std::make_unique<ConvKernel>();
  k->call_ = DnnlCall(dnnl::convolution_forward(pd));
  k->call_.Owned(DNNL_ARG_WEIGHTS, *wmem);
  if (node.input(2)) {
    absl::StatusOr<memory> bmem = PrepackConstant(ctx, *node.input(2)->constant, c->b_md, c->b_md);
    if (!bmem.ok()) return nullptr;
    k->call_.Owned(DNNL_ARG_BIAS, *bmem);
  }
  // Layout decisions last: they queue reorders and may move the output to the blocked arena.
  const int src = ctx.ReadAs(xs, pd.src_desc());
  // A residual that dies here lends its buffer to dst: the sum then reads it in place.
  const bool in_place = residual && rs != src && rs != xs &&
                        ctx.ShareDyingInput(rs, ys, pd.dst_desc());
  const int dst = in_place ? ys : ctx.WriteAs(ys, pd.dst_desc());
  if (residual && !in_place) {
    k->residual_ = MakeReorder(ctx, rs, ctx.StoredMd(rs), dst, pd.dst_desc());
  }
  ctx.NoteScratchpad(pd.scratchpad_desc());
  k->call_.Arg(DNNL_ARG_SRC, pd.src_desc(), src, ctx.engine);
  k->call_.Arg(DNNL_ARG_DST, pd.dst_desc(), dst, ctx.engine);
  k->call_.Arg(DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc(), ctx.scratch_slot, ctx.engine);
  return k;
}

}  // namespace kiln::cpu
