// MaxPool, AveragePool and GlobalAveragePool on oneDNN's pooling_v2 (dilations supported).
// The src is read in whatever layout its producer left it (pooling has no `any` src); the
// dst is `any`, so a pool between two convolutions stays blocked.
#include "ops/interpreter.h"
#include "runtime/cpu/build_context.h"
#include "runtime/cpu/conv_geometry.h"
#include "runtime/cpu/isa.h"
#include "runtime/cpu/transient_heap.h"

namespace kiln::cpu {
namespace {

using dnnl::memory;

// Max pooling is guarded (nonfinite_guard.h): oneDNN's drops NaN and starts from -FLT_MAX,
// so an input that is not all finite takes the exact path, the reference kernel on a plain
// copy (a pool is cheap even there). Average pools are exact; every pool passes its input's
// bound on (an average or a max never exceeds it).
struct ExactPool {
  dnnl::reorder to_plain, from_plain;
  memory::desc plain_in, plain_out;
  Tensor in;
};

class PoolKernel : public CpuKernel {
 public:
  absl::Status Run(const ExecContext& ctx) override;

  DnnlCall call_;
  const Node* node = nullptr;
  bool guarded = false;
  int x_slot = -1, src_slot = -1, dst_slot = -1, y_slot = -1;
  int64_t src_floats = 0;
  memory::desc src_md, dst_md;
  dnnl::engine engine;
  std::vector<int64_t> x_shape;

 private:
  absl::Status RunExact(const ExecContext& ctx);
  std::unique_ptr<ExactPool> exact_;
};

absl::Status PoolKernel::Run(const ExecContext& ctx) {
  float xb = ctx.bounds->Known(x_slot);
  if (!(xb <= kSafeBound) && guarded) xb = ctx.bounds->Of(src_slot, ctx.ptrs[src_slot], src_floats);
  if (guarded && !(xb <= kSafeBound)) return RunExact(ctx);
  RETURN_IF_ERROR(call_.Execute(ctx));
  if (xb <= kSafeBound) {
    ctx.bounds->Set(dst_slot, xb);
    ctx.bounds->Set(y_slot, xb);
  }
  return absl::OkStatus();
}

absl::Status PoolKernel::RunExact(const ExecContext& ctx) {
  try {
    if (!exact_) {
      TransientHeap::Suspend off_pool;  // these objects outlive the run
      auto e = std::make_unique<ExactPool>();
      e->plain_in = memory::desc(ToDims(x_shape), memory::data_type::f32, PlainTag(x_shape.size()));
      e->plain_out = memory::desc(dst_md.dims(), memory::data_type::f32, PlainTag(x_shape.size()));
      e->to_plain = dnnl::reorder(dnnl::reorder::primitive_desc(engine, src_md, engine, e->plain_in));
      e->from_plain =
          dnnl::reorder(dnnl::reorder::primitive_desc(engine, e->plain_out, engine, dst_md));
      e->in = Tensor(DType::kFloat32, x_shape);
      exact_ = std::move(e);
    }
    ExactPool& e = *exact_;
    memory src(src_md, engine, ctx.ptrs[src_slot]), plain(e.plain_in, engine, e.in.raw_mutable());
    e.to_plain.execute(*ctx.stream, src, plain);
    ASSIGN_OR_RETURN(std::vector<Tensor> out, ref::RunNode(*node, {&e.in}));
    memory res(e.plain_out, engine, out[0].raw_mutable()), dst(dst_md, engine, ctx.ptrs[dst_slot]);
    e.from_plain.execute(*ctx.stream, res, dst);
  } catch (const dnnl::error& err) {
    return absl::InternalError(std::string("pool exact path: oneDNN: ") + err.what());
  }
  return absl::OkStatus();
}

struct PoolSetup {
  dnnl::algorithm alg;
  WindowGeometry g;
};

std::optional<PoolSetup> ReadPool(const Node& node, const Slot& x, const Slot& y) {
  std::vector<int64_t> in(x.shape.begin() + 2, x.shape.end());
  std::vector<int64_t> out(y.shape.begin() + 2, y.shape.end());
  PoolSetup s;
  if (node.op_type == "GlobalAveragePool") {
    s.alg = dnnl::algorithm::pooling_avg_exclude_padding;
    WindowGeometry g;
    g.kernel = in;
    g.strides.assign(in.size(), 1);
    g.dilations.assign(in.size(), 1);
    g.pad_begin.assign(in.size(), 0);
    g.pad_end.assign(in.size(), 0);
    s.g = g;
    return s;
  }
  const std::vector<int64_t> kernel = node.GetInts("kernel_shape");
  if (node.op_type == "MaxPool") {
    if (node.output(1) || node.GetInt("storage_order", 0) != 0) return std::nullopt;
    s.alg = dnnl::algorithm::pooling_max;
  } else {
    const bool include = node.GetInt("count_include_pad", 0) != 0;
    if (include && node.GetInt("ceil_mode", 0) != 0) return std::nullopt;
    s.alg = include ? dnnl::algorithm::pooling_avg_include_padding
                    : dnnl::algorithm::pooling_avg_exclude_padding;
  }
  std::optional<WindowGeometry> g = ResolveWindow(node, in, out, kernel);
  if (!g) return std::nullopt;
  // Include-padding averages divide by the window size: only the pads ONNX declared may
  // count, so the derived end pads must match them.
  if (s.alg == dnnl::algorithm::pooling_avg_include_padding) {
    std::vector<int64_t> pads = node.GetInts("pads", std::vector<int64_t>(2 * in.size(), 0));
    for (size_t i = 0; i < in.size(); ++i) {
      if (g->pad_end[i] != pads[in.size() + i]) return std::nullopt;
    }
  }
  s.g = *g;
  return s;
}

struct PoolPrimitive {
  dnnl::pooling_v2_forward::primitive_desc pd;
  memory::desc src;
};

std::optional<PoolPrimitive> CreatePool(BuildContext& ctx, const PoolSetup& s,
                                        const memory::desc& src_md, const Slot& y,
                                        const memory::dims& dil) {
  memory::desc dst_any(ToDims(y.shape), src_md.data_type(), memory::format_tag::any);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  try {
    dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, s.alg, src_md, dst_any,
                                     ToDims(s.g.strides), ToDims(s.g.kernel), dil,
                                     ToDims(s.g.pad_begin), ToDims(s.g.pad_end));
    return PoolPrimitive{dnnl::pooling_v2_forward::primitive_desc(d, attr, ctx.engine), src_md};
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

}  // namespace

std::unique_ptr<CpuKernel> MakeDnnlPool(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || !IsConvFamily(node) || node.op_type == "Conv" ||
      node.op_type == "QLinearConv") {
    return nullptr;
  }
  const int xs = ctx.SlotOf(node.input(0)), ys = ctx.SlotOf(node.output(0));
  if (xs < 0 || ys < 0) return nullptr;
  const Slot& x = ctx.slots[xs];
  const Slot& y = ctx.slots[ys];
  // float32 pools; MaxPool also on int8/uint8 (a QDQ model's pools run on the quantized
  // values: max commutes with the monotonic dequantization).
  const bool f32 = x.dtype == DType::kFloat32;
  const bool int8_max = (x.dtype == DType::kUInt8 || x.dtype == DType::kInt8) &&
                        node.op_type == "MaxPool";
  if ((!f32 && !int8_max) || y.dtype != x.dtype || x.shape.size() < 3 || x.shape.size() > 5 ||
      y.shape.size() != x.shape.size() || NumElements(y.shape) == 0) {
    return nullptr;
  }
  std::optional<PoolSetup> s = ReadPool(node, x, y);
  if (!s || s->g.kernel.size() != x.shape.size() - 2) return nullptr;
  memory::dims dil;
  for (int64_t d : s->g.dilations) dil.push_back(d - 1);
  // The input's stored layout first; where oneDNN has only its reference pooling for it (a
  // block size this CPU's kernels do not take), the ISA's block or channels-last, read
  // through a reorder.
  const size_t rank = x.shape.size();
  std::vector<memory::desc> candidates = {ctx.StoredMd(xs)};
  const memory::dims xd = ToDims(x.shape);
  using tag = memory::format_tag;
  const bool b16 = CpuIsa().channel_block == 16;
  const tag block_tag[] = {b16 ? tag::nCw16c : tag::nCw8c, b16 ? tag::nChw16c : tag::nChw8c,
                           b16 ? tag::nCdhw16c : tag::nCdhw8c};
  const tag last_tag[] = {tag::nwc, tag::nhwc, tag::ndhwc};
  const memory::data_type type = ctx.PlainMd(xs).data_type();
  candidates.emplace_back(xd, type, block_tag[rank - 3]);
  candidates.emplace_back(xd, type, last_tag[rank - 3]);
  std::optional<PoolPrimitive> chosen;
  for (const memory::desc& src : candidates) {
    std::optional<PoolPrimitive> p = CreatePool(ctx, *s, src, y, dil);
    if (!p) continue;
    if (!chosen || !IsReferenceImpl(p->pd.impl_info_str())) chosen = p;
    if (!IsReferenceImpl(p->pd.impl_info_str())) break;
  }
  if (!chosen) return nullptr;
  ctx.NoteImplementation(node, chosen->pd.impl_info_str());
  const dnnl::pooling_v2_forward::primitive_desc& pd = chosen->pd;
  const memory::desc& src_md = chosen->src;
  auto k = std::make_unique<PoolKernel>();
  k->call_ = DnnlCall(dnnl::pooling_v2_forward(pd));
  ctx.NoteScratchpad(pd.scratchpad_desc());
  k->node = &node;
  k->guarded = s->alg == dnnl::algorithm::pooling_max && f32;  // integers have no NaN
  k->x_slot = xs;
  k->src_slot = ctx.ReadAs(xs, src_md);
  k->dst_slot = ctx.WriteAs(ys, pd.dst_desc());
  k->y_slot = ys;
  k->src_floats = static_cast<int64_t>(src_md.get_size() / sizeof(float));
  k->src_md = src_md;
  k->dst_md = pd.dst_desc();
  k->engine = ctx.engine;
  k->x_shape = ctx.slots[xs].shape;
  k->call_.Arg(DNNL_ARG_SRC, src_md, k->src_slot, ctx.engine);
  k->call_.Arg(DNNL_ARG_DST, pd.dst_desc(), k->dst_slot, ctx.engine);
  k->call_.Arg(DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc(), ctx.scratch_slot, ctx.engine);
  return k;
}

}  // namespace kiln::cpu
