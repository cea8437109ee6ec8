// Conv and ai.kiln.FusedConv on oneDNN's convolution_forward. src and dst are created with
// format `any` so the primitive picks its preferred (blocked) layout; weights are reordered
// to the primitive's layout once, at build. Epilogue activations become eltwise post-ops; a
// residual Add becomes the `sum` post-op, which adds what dst held before the primitive ran,
// so the residual is reordered/copied into the dst buffer first.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>

#include "base/aligned.h"
#include "ir/kiln_ops.h"
#include "runtime/cpu/build_context.h"
#include "runtime/cpu/conv_geometry.h"
#include "runtime/cpu/dnnl_conv_kernel.h"
#include "runtime/cpu/dnnl_post_ops.h"
#include "runtime/cpu/epilogue_ops.h"
#include "runtime/cpu/isa.h"
#include "runtime/cpu/primitive_timing.h"
#include "runtime/cpu/transient_heap.h"

namespace kiln::cpu {
namespace {

using dnnl::memory;

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
  ConvGeometry geometry;
};

// The primitive for this node's geometry, src/dst/weights in `any` layout; nullopt when the
// attributes are outside what oneDNN takes or oneDNN has no implementation.
std::optional<ConvPrimitive> CreatePrimitive(
    BuildContext& ctx, const Node& node, const ConvShapes& sh, const dnnl::post_ops& po, bool block,
    bool bf16, dnnl::algorithm algo = dnnl::algorithm::convolution_direct) {
  std::vector<int64_t> in(sh.x->shape.begin() + 2, sh.x->shape.end());
  std::vector<int64_t> out(sh.y->shape.begin() + 2, sh.y->shape.end());
  std::vector<int64_t> ker(sh.w->shape.begin() + 2, sh.w->shape.end());
  std::optional<WindowGeometry> g = ResolveWindow(node, in, out, ker);
  const int64_t group = node.GetInt("group", 1);
  if (!g || group < 1 || sh.w->shape[0] % group != 0) return std::nullopt;
  memory::dims dil;
  for (int64_t d : g->dilations) dil.push_back(d - 1);  // oneDNN counts the gaps
  const auto f32 = memory::data_type::f32;
  // kiln_precision "bf16": src (converted each run) and weights (once) in bf16, dst float32.
  const auto operand = bf16 ? memory::data_type::bf16 : f32;
  const auto any = memory::format_tag::any;
  // Blocked: 16-channel blocks for the activations. The source of a layer with under 8
  // channels (an image's RGB) stays the primitive's choice: blocking 3 channels to 16 would
  // multiply its reads.
  const memory::format_tag blocked = BlockedTag(sh.x->shape.size());
  block = block && blocked != any;
  const memory::format_tag src_tag = block && sh.x->shape[1] >= 8 ? blocked : any;
  const memory::format_tag dst_tag = block ? blocked : any;
  ConvPrimitive c;
  memory::dims wdims = ConvWeightDims(sh.w->shape, group);
  c.w_plain = memory::desc(wdims, f32, PlainTag(wdims.size()));
  if (node.input(2)) c.b_md = memory::desc({sh.w->shape[0]}, f32, memory::format_tag::a);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_post_ops(po);
  try {
    dnnl::convolution_forward::desc d(
        dnnl::prop_kind::forward_inference, algo,
        memory::desc(ToDims(sh.x->shape), operand, src_tag), memory::desc(wdims, operand, any),
        c.b_md, memory::desc(ToDims(sh.y->shape), f32, dst_tag), ToDims(g->strides), dil,
        ToDims(g->pad_begin), ToDims(g->pad_end));
    c.pd = dnnl::convolution_forward::primitive_desc(d, attr, ctx.engine);
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
  c.geometry.strides = ToDims(g->strides);
  c.geometry.dilations = dil;
  c.geometry.pad_begin = ToDims(g->pad_begin);
  c.geometry.pad_end = ToDims(g->pad_end);
  c.geometry.bias_md = c.b_md;
  return c;
}

// Whether oneDNN has a Winograd kernel for this node's geometry: a 3x3, stride-1,
// undilated, ungrouped 2-D float convolution (ruled out from the attributes before a
// primitive is created for nothing).
bool WinogradShape(const BuildContext& ctx, const Node& node, const ConvShapes& sh) {
  auto ones = [&](const char* attr) {
    for (int64_t v : node.GetInts(attr, {})) {
      if (v != 1) return false;
    }
    return true;
  };
  return ctx.winograd && sh.w->shape.size() == 4 && sh.w->shape[2] == 3 && sh.w->shape[3] == 3 &&
         node.GetInt("group", 1) == 1 && ones("strides") && ones("dilations");
}

std::optional<ConvPrimitive> AsWinograd(const Node& node, std::optional<ConvPrimitive> c) {
  if (!c || std::string(c->pd.impl_info_str()).find("wino") == std::string::npos) {
    return std::nullopt;
  }
  c->geometry.winograd = true;
  c->geometry.plain_weights = *node.input(1)->constant;
  return c;
}

// Such a convolution has two kernels in oneDNN: the direct one and Winograd's (F(4x4, 3x3)
// or F(2x2, 3x3), AVX-512 only), which computes on transformed tiles: 2.25x fewer
// multiplications and a slightly different rounding (densenet121 b8, relative error against
// the reference 3.8e-7 -> 4.6e-7). A transformed tile spreads a NaN or an infinity over
// neighbours the direct kernel would leave finite, so the kernel is guarded: an input not
// known finite takes the direct exact path. oneDNN's `convolution_auto` heuristic takes
// Winograd from a batch of kTimedBelowBatch in the blocked layout, and there it is kept. Below
// that batch the heuristic declines, yet on one image Winograd is often far faster and
// sometimes slower (2 threads, AVX-512: 128 channels at 28x28 1.00 -> 0.37 ms; 112 -> 224
// channels at 14x14 0.37 -> 0.45 ms), so there the two are timed at build where they take the
// same activation layouts (primitive_timing.h) and Winograd kept when under kWinogradGain of
// the direct kernel's time (its rounding must buy something; a near-tie is not worth a
// choice noise could flip). Not from that batch on: the trials of large convolutions made
// builds long enough that the layout tuner kept its first candidate (the primitive layout,
// without Winograd), vgg16_bn b8 1066 -> 2364 ms.
constexpr int64_t kTimedBelowBatch = 4;
constexpr double kWinogradGain = 0.9;

// The heuristic's choice: Winograd where `convolution_auto` takes it, else nullopt.
std::optional<ConvPrimitive> HeuristicWinograd(BuildContext& ctx, const Node& node,
                                               const ConvShapes& sh, const dnnl::post_ops& po,
                                               bool blocked) {
  if (!WinogradShape(ctx, node, sh)) return std::nullopt;
  return AsWinograd(
      node, CreatePrimitive(ctx, node, sh, po, blocked, false, dnnl::algorithm::convolution_auto));
}

// Whether every epilogue step is an activation the own element-wise ops run (no residual).
bool ActivationsOnly(const Node& node, const dnnl::post_ops& po) {
  if (po.len() == 0 || node.domain != kKilnDomain) return false;
  for (const kiln_ops::EpilogueStep& s : kiln_ops::ReadEpilogue(node)) {
    if (!MakeEpilogueActivation(s)) return false;
  }
  return true;
}

// The activations of the node's epilogue, or empty when one of them maps 0 to something else
// and dst has blocked padding (channels beyond the count, which later kernels read as zeros).
std::vector<EpilogueActivation> AfterActivations(const Node& node, const ConvPrimitive& c,
                                                 const ConvShapes& sh) {
  std::vector<EpilogueActivation> acts;
  const bool padded = c.pd.dst_desc().get_size() > NumElements(sh.y->shape) * sizeof(float);
  for (const kiln_ops::EpilogueStep& s : kiln_ops::ReadEpilogue(node)) {
    std::optional<EpilogueActivation> a = MakeEpilogueActivation(s);
    float zero = 0.f;
    if (a) ApplyActivation(*a, &zero, 1);
    if (!a || (padded && zero != 0.f)) return {};
    acts.push_back(*a);
  }
  return acts;
}

// `rival` kept where it runs in under `gain` times `direct`'s time (below kTimedBelowBatch,
// where both take the same activation layouts, primitive_timing.h); `acts`, when not empty,
// run after the rival on its dst and count in its time (the rival was made without them).
std::optional<ConvPrimitive> KeptIfFaster(BuildContext& ctx, const ConvShapes& sh,
                                          const dnnl::post_ops& po, const ConvPrimitive& direct,
                                          std::optional<ConvPrimitive> rival,
                                          const std::vector<EpilogueActivation>& acts,
                                          const char* what, double gain) {
  if (!rival || sh.x->shape[0] >= kTimedBelowBatch || ctx.trial_ms_left <= 0 ||
      rival->pd.src_desc() != direct.pd.src_desc() ||
      rival->pd.dst_desc() != direct.pd.dst_desc()) {
    return std::nullopt;
  }
  const std::string key =
      ConvTrialKey(direct.pd, po, direct.geometry.pad_begin, direct.geometry.pad_end) + " " + what;
  AfterRun after;
  if (!acts.empty()) after = [&acts](float* y, int64_t n) { RunActivations(acts, y, n); };
  if (!SecondFaster(ctx, key, direct.pd, rival->pd, gain, after).value_or(false)) {
    return std::nullopt;
  }
  rival->geometry.after = acts;
  return rival;
}

// Where the heuristic declined: Winograd when timed faster than `direct`, else nullopt.
std::optional<ConvPrimitive> TimedWinograd(BuildContext& ctx, const Node& node,
                                           const ConvShapes& sh, const dnnl::post_ops& po,
                                           bool blocked, const ConvPrimitive& direct) {
  if (!WinogradShape(ctx, node, sh)) return std::nullopt;
  return KeptIfFaster(ctx, sh, po, direct,
                      AsWinograd(node, CreatePrimitive(ctx, node, sh, po, blocked, false,
                                                       dnnl::algorithm::convolution_winograd)),
                      {}, "winograd", kWinogradGain);
}

// Winograd for a convolution whose activations oneDNN's Winograd kernel does not take as
// post-ops (oneDNN 2.6 takes ReLU-like ones; EfficientNetV2's and YOLO's 3x3 layers end in
// SiLU, others in GELU): the primitive without them, and they run after it on its dst, one
// more pass over it. Chosen as Winograd with its post-ops is: by the heuristic from a batch
// of kTimedBelowBatch, below it timed (with the pass after it) against the direct kernel
// with the activations fused.
std::optional<ConvPrimitive> WinogradActivationsAfter(BuildContext& ctx, const Node& node,
                                                      const ConvShapes& sh,
                                                      const dnnl::post_ops& po, bool blocked,
                                                      const ConvPrimitive& direct) {
  if (!WinogradShape(ctx, node, sh) || !ActivationsOnly(node, po)) return std::nullopt;
  // A Winograd kernel that takes them was asked above (by the heuristic or the timing).
  if (CreatePrimitive(ctx, node, sh, po, blocked, false, dnnl::algorithm::convolution_winograd)) {
    return std::nullopt;
  }
  const bool heuristic = sh.x->shape[0] >= kTimedBelowBatch;
  std::optional<ConvPrimitive> w =
      heuristic ? HeuristicWinograd(ctx, node, sh, dnnl::post_ops(), blocked)
                : AsWinograd(node, CreatePrimitive(ctx, node, sh, dnnl::post_ops(), blocked, false,
                                                   dnnl::algorithm::convolution_winograd));
  const std::vector<EpilogueActivation> acts =
      w ? AfterActivations(node, *w, sh) : std::vector<EpilogueActivation>{};
  if (acts.empty()) return std::nullopt;
  if (!heuristic)
    return KeptIfFaster(ctx, sh, po, direct, w, acts, "winograd after", kWinogradGain);
  w->geometry.after = acts;
  return w;
}

// oneDNN 2.6's swish and logistic post-ops cost more than the own element-wise SiLU and
// Sigmoid run over dst after the bare convolution, at AVX-512 (a 1x1 convolution 16 -> 96
// channels at 112x112, b1, 2 threads: SiLU fused 0.56-0.61 ms, after 0.52-0.56; Sigmoid
// 0.56-0.57 / 0.49-0.50), and less at the AVX2 cap (SiLU 0.90-1.04 / 1.36), while GELU,
// Tanh, HardSwish and ReLU cost less fused everywhere. So convolutions ending in SiLU or
// Sigmoid time both below kTimedBelowBatch, the pass after counted.
constexpr double kAfterGain = 0.95;

bool EndsInSiluOrSigmoid(const Node& node) {
  for (const kiln_ops::EpilogueStep& s : kiln_ops::ReadEpilogue(node)) {
    if (s.op == "SiLU" || s.op == "Sigmoid") return true;
  }
  return false;
}

std::optional<ConvPrimitive> TimedActivationsAfter(BuildContext& ctx, const Node& node,
                                                   const ConvShapes& sh, const dnnl::post_ops& po,
                                                   bool blocked, const ConvPrimitive& direct) {
  if (!ActivationsOnly(node, po) || !EndsInSiluOrSigmoid(node) ||
      sh.x->shape[0] >= kTimedBelowBatch) {
    return std::nullopt;
  }
  std::optional<ConvPrimitive> bare =
      CreatePrimitive(ctx, node, sh, dnnl::post_ops(), blocked, false);
  if (!bare || IsReferenceImpl(bare->pd.impl_info_str())) return std::nullopt;
  const std::vector<EpilogueActivation> acts = AfterActivations(node, *bare, sh);
  if (acts.empty()) return std::nullopt;
  return KeptIfFaster(ctx, sh, po, direct, bare, acts, "after", kAfterGain);
}

// Whether the epilogue has a step oneDNN does not compute as ONNX does on NaN.
bool NeedsGuard(const std::vector<kiln_ops::EpilogueStep>& steps) {
  for (const kiln_ops::EpilogueStep& s : steps) {
    if (s.op != "Add" && !PostOpKeepsNonFinite(s)) return true;
  }
  return false;
}

// Whether the node has post-ops that the exact path can run with the own ops instead.
bool EpilogueRunsApart(const Node& node, const dnnl::post_ops& po) {
  if (po.len() == 0 || node.domain != kKilnDomain) return false;
  for (const kiln_ops::EpilogueStep& s : kiln_ops::ReadEpilogue(node)) {
    if (s.op != "Add" && !MakeEpilogueActivation(s)) return false;
  }
  return true;
}

// The convolution in the layout the engine wants (`blocked`) if oneDNN has a JIT kernel for
// it there, else in the primitive's own choice of layout (which may still be reference code).
std::optional<ConvPrimitive> InEngineLayout(BuildContext& ctx, const Node& node,
                                            const ConvShapes& sh, const dnnl::post_ops& po,
                                            bool blocked, bool bf16) {
  std::optional<ConvPrimitive> c = CreatePrimitive(ctx, node, sh, po, blocked, bf16);
  if (blocked && c && IsReferenceImpl(c->pd.impl_info_str())) {
    c = CreatePrimitive(ctx, node, sh, po, false, bf16);
  }
  return c;
}

// The convolution without post-ops (float32), as InEngineLayout places it; nullopt when both
// layouts are reference code.
std::optional<ConvPrimitive> BarePrimitive(BuildContext& ctx, const Node& node,
                                           const ConvShapes& sh, bool blocked) {
  std::optional<ConvPrimitive> c = InEngineLayout(ctx, node, sh, dnnl::post_ops(), blocked, false);
  if (!c || IsReferenceImpl(c->pd.impl_info_str())) return std::nullopt;
  return c;
}

}  // namespace

memory::dims ConvWeightDims(const std::vector<int64_t>& w, int64_t group) {
  if (group == 1) return ToDims(w);
  memory::dims d = {group, w[0] / group};
  d.insert(d.end(), w.begin() + 1, w.end());
  return d;
}

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
  // bf16 only where oneDNN has a JIT kernel for it (else this convolution stays float32).
  bool bf16 = node.GetString(kiln_ops::kPrecisionAttr, "") == "bf16";
  std::optional<ConvPrimitive> c;
  if (bf16) {
    c = InEngineLayout(ctx, node, sh, po, blocked, true);
    bf16 = c && !IsReferenceImpl(c->pd.impl_info_str());
  }
  if (!bf16) {
    c = HeuristicWinograd(ctx, node, sh, po, blocked);
    if (!c) {  // the direct primitive, and Winograd if timed faster than it
      c = InEngineLayout(ctx, node, sh, po, blocked, false);
      std::optional<ConvPrimitive> w;
      if (c && !IsReferenceImpl(c->pd.impl_info_str())) {
        w = TimedWinograd(ctx, node, sh, po, blocked, *c);
        if (!w) w = WinogradActivationsAfter(ctx, node, sh, po, blocked, *c);
        if (!w) w = TimedActivationsAfter(ctx, node, sh, po, blocked, *c);
      }
      if (w) c = std::move(w);
    }
  }
  const bool apart = c && IsReferenceImpl(c->pd.impl_info_str()) && EpilogueRunsApart(node, po);
  if (apart) {
    // oneDNN 2.6 below AVX-512 has no JIT kernel for some post-op chains (and would run the
    // whole convolution on its reference code): the bare convolution, then the epilogue with
    // the own element-wise ops.
    std::optional<ConvPrimitive> bare = BarePrimitive(ctx, node, sh, blocked);
    if (bare) c = std::move(bare);
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
    k->bias = *bmem;
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
  if (fused) k->steps = kiln_ops::ReadEpilogue(node);
  k->guarded = NeedsGuard(k->steps) || c->geometry.winograd;
  k->epilogue_apart = apart && !IsReferenceImpl(pd.impl_info_str());
  k->x_slot = xs;
  k->src_slot = src;
  k->res_slot = residual ? rs : -1;
  k->dst_slot = dst;
  k->y_slot = ys;
  k->scan_slot = bf16 ? xs : src;
  k->scan_floats = static_cast<int64_t>((bf16 ? ctx.StoredMd(xs) : pd.src_desc()).get_size() / sizeof(float));
  k->slack = bf16 ? 1.01f : 1.001f;
  ctx.bf16_ops += bf16;
  ctx.winograd_ops += c->geometry.winograd;
  ctx.activations_after += !c->geometry.after.empty();
  k->res_floats = residual ? static_cast<int64_t>(ctx.StoredMd(rs).get_size() / sizeof(float)) : 0;
  k->dst_floats = static_cast<int64_t>(pd.dst_desc().get_size() / sizeof(float));
  ConvWeightGains(node, &k->w_l1, &k->b_max);
  k->engine = ctx.engine;
  k->pd = pd;
  k->geometry = c->geometry;
  k->weights = *wmem;
  return k;
}

}  // namespace kiln::cpu
