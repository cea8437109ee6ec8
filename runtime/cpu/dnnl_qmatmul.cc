// QLinearMatMul on oneDNN's int8 matmul: a uint8/int8 activation [..., M, K] (its leading
// dims flattened into rows: one 2-D product, the weights packed once), constant int8
// weights [K, N] with zero point 0 and one scale or one per column, the requantization of
// qlinear.h as oneDNN's output scales and zero points. Where the int8 kernels would not be
// exact on this CPU, oneDNN's float32 matmul over the same integers (qlinear.h).
#include <cmath>
#include <optional>

#include "runtime/cpu/build_context.h"
#include "runtime/cpu/qlinear.h"

namespace kiln::cpu {
namespace {

using dnnl::memory;

class QMatMulKernel : public CpuKernel {
 public:
  absl::Status Run(const ExecContext& ctx) override { return call.Execute(ctx); }
  DnnlCall call;
};

// The product's 2-D view: rows x k times k x n.
struct QMatMulShape {
  int64_t rows = 0, k = 0, n = 0;
};

std::optional<QMatMulShape> ShapeOf(const Node& node, const Slot& a, const Slot& y) {
  const Tensor* b = ConstInput(node, 3);
  if (!node.domain.empty() || node.op_type != "QLinearMatMul" || !b) return std::nullopt;
  if (!ByteType(a.dtype) || !ByteType(y.dtype) || b->dtype() != DType::kInt8 || b->rank() != 2 ||
      a.shape.size() < 2) {
    return std::nullopt;
  }
  QMatMulShape s{NumElements(a.shape) / std::max<int64_t>(1, a.shape.back()), b->dim(0), b->dim(1)};
  if (a.shape.back() != s.k || s.rows == 0 || s.k == 0 || s.n == 0 ||
      NumElements(y.shape) != s.rows * s.n) {
    return std::nullopt;
  }
  return s;
}

std::optional<dnnl::matmul::primitive_desc> Int8Primitive(BuildContext& ctx, const QMatMulShape& s,
                                                          DType a, DType y, const QParams& p) {
  const dnnl::primitive_attr attr = Int8Attr(p);
  using tag = memory::format_tag;
  try {
    dnnl::matmul::desc d(memory::desc({s.rows, s.k}, *ByteType(a), tag::ab),
                         memory::desc({s.k, s.n}, memory::data_type::s8, tag::any),
                         memory::desc({s.rows, s.n}, *ByteType(y), tag::ab));
    return dnnl::matmul::primitive_desc(d, attr, ctx.engine);
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

std::unique_ptr<CpuKernel> MakeInt8(BuildContext& ctx, const Node& node, int as, int ys,
                                    const QMatMulShape& s, const QParams& p) {
  const Slot &a = ctx.slots[as], &y = ctx.slots[ys];
  auto pd = Int8Primitive(ctx, s, a.dtype, y.dtype, p);
  if (!pd) return nullptr;
  ctx.NoteImplementation(node, pd->impl_info_str());
  const memory::desc w_plain({s.k, s.n}, memory::data_type::s8, memory::format_tag::ab);
  absl::StatusOr<memory> w = PrepackConstant(ctx, *ConstInput(node, 3), w_plain, pd->weights_desc());
  if (!w.ok()) return nullptr;
  auto k = std::make_unique<QMatMulKernel>();
  k->call = DnnlCall(dnnl::matmul(*pd));
  k->call.Owned(DNNL_ARG_WEIGHTS, *w);
  k->call.Arg(DNNL_ARG_SRC, pd->src_desc(), ctx.ReadAs(as, ctx.PlainMd(as)), ctx.engine);
  k->call.Arg(DNNL_ARG_DST, pd->dst_desc(), ctx.WriteAs(ys, ctx.PlainMd(ys)), ctx.engine);
  ctx.NoteScratchpad(pd->scratchpad_desc());
  k->call.Arg(DNNL_ARG_SCRATCHPAD, pd->scratchpad_desc(), ctx.scratch_slot, ctx.engine);
  return k;
}

std::unique_ptr<CpuKernel> MakeFloat(BuildContext& ctx, const Node& node, int as, int ys,
                                     const QMatMulShape& s, const QParams& p) {
  const Tensor& b = *ConstInput(node, 3);
  std::vector<double> sums(s.n, 0.0);  // sum |w| per column
  for (int64_t i = 0; i < b.numel(); ++i) sums[i % s.n] += std::fabs(b.GetDouble(i));
  if (!FloatAccumulationExact(sums, nullptr, ctx.slots[as].dtype, p.x_zero)) return nullptr;
  using tag = memory::format_tag;
  const auto f32 = memory::data_type::f32;
  const memory::desc src({s.rows, s.k}, f32, tag::ab), dst({s.rows, s.n}, f32, tag::ab);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  std::optional<dnnl::matmul::primitive_desc> pd;
  try {
    pd = dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(src, memory::desc({s.k, s.n}, f32, tag::any), dst), attr, ctx.engine);
  } catch (const dnnl::error&) {
    return nullptr;
  }
  if (IsReferenceImpl(pd->impl_info_str())) return nullptr;
  ctx.NoteImplementation(node, pd->impl_info_str());
  absl::StatusOr<memory> w = PrepackConstant(ctx, ToFloat(b), memory::desc({s.k, s.n}, f32, tag::ab),
                                             pd->weights_desc());
  if (!w.ok()) return nullptr;
  auto k = std::make_unique<QLinearFloatKernel>();
  k->SetQuantization(ctx.slots[as].dtype, ctx.slots[ys].dtype, p, s.n, s.rows * s.k, s.rows * s.n);
  k->product = DnnlCall(dnnl::matmul(*pd));
  k->product.Owned(DNNL_ARG_WEIGHTS, *w);
  k->Bind(ctx, as, ctx.PlainMd(as), ys, ctx.PlainMd(ys), src, dst, pd->scratchpad_desc());
  return k;
}

}  // namespace

std::unique_ptr<CpuKernel> MakeDnnlQMatMul(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() || node.op_type != "QLinearMatMul") return nullptr;
  const int as = ctx.SlotOf(node.input(0)), ys = ctx.SlotOf(node.output(0));
  if (as < 0 || ys < 0) return nullptr;
  std::optional<QMatMulShape> s = ShapeOf(node, ctx.slots[as], ctx.slots[ys]);
  if (!s) return nullptr;
  std::optional<QParams> p = ReadQParams(node, s->n);
  if (!p) return nullptr;
  if (!Int8ExactOnThisCpu(*ConstInput(node, 3), ctx.slots[as].dtype)) {
    return MakeFloat(ctx, node, as, ys, *s, *p);
  }
  return MakeInt8(ctx, node, as, ys, *s, *p);
}

}  // namespace kiln::cpu
