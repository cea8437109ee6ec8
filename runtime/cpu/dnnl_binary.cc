// Add/Sub/Mul/Div of an activation a convolution left in its own layout (channel blocks or
// channels-last) with a per-channel or scalar operand, on oneDNN's binary primitive in that
// layout: a squeeze-and-excitation block's x * scale[N, C, 1, 1] no longer reorders x to
// plain and back. IEEE arithmetic (NaN and infinities propagate as in the reference); Max,
// Min and the rest stay on the own element-wise kernel.
#include "runtime/cpu/build_context.h"

namespace kiln::cpu {
namespace {

using dnnl::memory;

class BinaryKernel : public CpuKernel {
 public:
  absl::Status Run(const ExecContext& ctx) override { return call_.Execute(ctx); }
  DnnlCall call_;
};

std::optional<dnnl::algorithm> AlgorithmOf(const Node& node) {
  if (!node.domain.empty()) return std::nullopt;
  if (node.op_type == "Add") return dnnl::algorithm::binary_add;
  if (node.op_type == "Sub") return dnnl::algorithm::binary_sub;
  if (node.op_type == "Mul") return dnnl::algorithm::binary_mul;
  if (node.op_type == "Div") return dnnl::algorithm::binary_div;
  return std::nullopt;
}

// The per-channel operand [N or 1, C or 1, 1, ...] as oneDNN's binary takes it beside the
// activation. Plain, or, beside channel blocks, the same blocking: with every spatial dim 1
// and whole blocks the two place every element at the same offset, so no data moves, and
// oneDNN has a kernel for matching layouts where it has none for plain-beside-blocked.
memory::desc SmallOperandMd(const memory::desc& x_md, const std::vector<int64_t>& bs) {
  const memory::desc plain(ToDims(bs), memory::data_type::f32, PlainTag(bs.size()));
  const dnnl_memory_desc_t& x = x_md.data;
  if (x.format_kind != dnnl_blocked || x.format_desc.blocking.inner_nblks != 1 ||
      x.format_desc.blocking.inner_idxs[0] != 1 || bs[1] == 1) {
    return plain;
  }
  const int64_t block = x.format_desc.blocking.inner_blks[0];
  if (bs[1] % block != 0 || (block != 8 && block != 16)) return plain;
  using tag = memory::format_tag;
  const tag b8[] = {tag::nCw8c, tag::nChw8c, tag::nCdhw8c};
  const tag b16[] = {tag::nCw16c, tag::nChw16c, tag::nCdhw16c};
  return memory::desc(ToDims(bs), memory::data_type::f32,
                      block == 16 ? b16[bs.size() - 3] : b8[bs.size() - 3]);
}

}  // namespace

int LayoutBinaryActivationInput(const Node& node) {
  if (!AlgorithmOf(node) || node.inputs.size() != 2 || !node.output(0)) return -1;
  const Value* y = node.output(0);
  if (!y->shape || !IsStatic(*y->shape) || y->dtype != DType::kFloat32) return -1;
  const std::vector<int64_t> ys = StaticDims(*y->shape);
  if (ys.size() < 3 || ys.size() > 5) return -1;
  for (int big = 0; big < 2; ++big) {
    const Value* a = node.input(big);
    const Value* b = node.input(1 - big);
    if (!a || !b || !a->shape || !b->shape || !IsStatic(*a->shape) || !IsStatic(*b->shape)) continue;
    if (a->dtype != DType::kFloat32 || b->dtype != DType::kFloat32) continue;
    if (StaticDims(*a->shape) != ys) continue;
    // The other: a scalar, or [N or 1, C or 1, 1, ...] (padded to the rank with leading 1s).
    std::vector<int64_t> bs = StaticDims(*b->shape);
    if (bs.size() > ys.size()) continue;
    bs.insert(bs.begin(), ys.size() - bs.size(), 1);
    bool ok = (bs[0] == 1 || bs[0] == ys[0]) && (bs[1] == 1 || bs[1] == ys[1]);
    for (size_t d = 2; d < bs.size(); ++d) ok = ok && bs[d] == 1;
    // oneDNN broadcasts its second operand only: s - x and s / x are not its to compute.
    const bool ordered = node.op_type == "Sub" || node.op_type == "Div";
    if (ok && !(ordered && big == 1)) return big;
  }
  return -1;
}

std::unique_ptr<CpuKernel> MakeDnnlBinary(BuildContext& ctx, const Node& node) {
  const int big = LayoutBinaryActivationInput(node);
  if (big < 0) return nullptr;
  const int xs = ctx.SlotOf(node.input(big)), ss = ctx.SlotOf(node.input(1 - big));
  const int ys = ctx.SlotOf(node.output(0));
  if (xs < 0 || ss < 0 || ys < 0 || ctx.slots[xs].is_plain()) return nullptr;
  const memory::desc x_md = ctx.StoredMd(xs);
  std::vector<int64_t> bs = ctx.slots[ss].shape;
  bs.insert(bs.begin(), ctx.slots[ys].shape.size() - bs.size(), 1);
  const memory::desc s_md = SmallOperandMd(x_md, bs);
  const memory::desc y_any(ToDims(ctx.slots[ys].shape), memory::data_type::f32,
                           memory::format_tag::any);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::binary::primitive_desc pd;
  const dnnl::algorithm alg = *AlgorithmOf(node);  // commutative when the activation is second
  try {
    pd = dnnl::binary::primitive_desc(dnnl::binary::desc(alg, x_md, s_md, y_any), attr,
                                      ctx.engine);
  } catch (const dnnl::error&) {
    return nullptr;
  }
  if (IsReferenceImpl(pd.impl_info_str())) return nullptr;
  auto k = std::make_unique<BinaryKernel>();
  k->call_ = DnnlCall(dnnl::binary(pd));
  const int s_slot = ctx.slots[ss].is_plain() ? ss : ctx.ReadAs(ss, ctx.PlainMd(ss));
  k->call_.Arg(DNNL_ARG_SRC_0, x_md, xs, ctx.engine);
  k->call_.Arg(DNNL_ARG_SRC_1, s_md, s_slot, ctx.engine);
  k->call_.Arg(DNNL_ARG_DST, pd.dst_desc(), ctx.WriteAs(ys, pd.dst_desc()), ctx.engine);
  ctx.NoteScratchpad(pd.scratchpad_desc());
  k->call_.Arg(DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc(), ctx.scratch_slot, ctx.engine);
  return k;
}

}  // namespace kiln::cpu
