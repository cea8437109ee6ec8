// MatMul, Gemm and ai.kiln.FusedMatMul on oneDNN's matmul primitive. Batch dims broadcast
// (operands are padded to the output's rank with leading 1s); transposes are strides; a
// constant B is prepacked into the primitive's layout once (scaled by alpha when needed); a
// constant C becomes the bias (scaled by beta), a runtime C and residual Adds become binary
// post-ops that read their operands where they are (no copy). A batch of rows times one
// matrix is described as a single 2-D product (see Views).
#include <algorithm>
#include <cstdlib>
#include <string>

#include "ir/kiln_ops.h"
#include "runtime/cpu/build_context.h"
#include "runtime/cpu/dnnl_post_ops.h"
#include "runtime/cpu/matmul_spec.h"

namespace kiln::cpu {
namespace {

using dnnl::memory;

class MatMulKernel : public CpuKernel {
 public:
  absl::Status Run(const ExecContext& ctx) override { return call_.Execute(ctx); }
  DnnlCall call_;
};


// `dims` padded with leading 1s to `rank`.
memory::dims PadTo(const std::vector<int64_t>& dims, size_t rank) {
  memory::dims d(rank - dims.size(), 1);
  d.insert(d.end(), dims.begin(), dims.end());
  return d;
}

// A row-major desc of logical dims, or, when `trans`, of logical dims whose storage is
// row-major with the last two swapped: each matrix's logical (i, j) is at j * rows + i.
memory::desc OperandMd(const memory::dims& d, bool trans,
                       memory::data_type type = memory::data_type::f32) {
  if (!trans) return memory::desc(d, type, PlainTag(d.size()));
  const size_t n = d.size();
  memory::dims strides(n);
  strides[n - 2] = 1;
  strides[n - 1] = d[n - 2];
  memory::dim next = d[n - 2] * d[n - 1];
  for (size_t i = n - 2; i-- > 0;) {
    strides[i] = next;
    next *= d[i];
  }
  return memory::desc(d, type, strides);
}

void SwapLastTwo(memory::dims& d) { std::swap(d[d.size() - 1], d[d.size() - 2]); }

// Broadcast operand (C or a residual) desc: every dim 1 or the output's.
std::optional<memory::desc> BroadcastMd(const std::vector<int64_t>& shape,
                                        const std::vector<int64_t>& out) {
  if (shape.size() > out.size()) return std::nullopt;
  memory::dims d = PadTo(shape, out.size());
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i] != 1 && d[i] != out[i]) return std::nullopt;
  }
  return memory::desc(d, memory::data_type::f32, PlainTag(d.size()));
}

Tensor Scaled(const Tensor& t, float s) {
  Tensor c = t.Clone();
  float* p = c.mutable_data<float>();
  for (int64_t i = 0; i < c.numel(); ++i) p[i] *= s;
  return c;
}

// The shapes the product is described with. A product whose B is one matrix (rank 2, or
// leading 1s) and whose other operands repeat per row or not at all runs as one 2-D product
// over all rows of A: oneDNN then packs B once and blocks M = batch x rows, instead of
// looping over batches of a few rows with B unpacked (bert's [8,16,64] x [64,64]).
struct Views {
  bool flat = false;
  std::vector<int64_t> y;       // the output's shape as described to oneDNN
  std::vector<int64_t> y_full;  // the output's real shape
  // An operand's shape as described: itself, or its 2-D view when flat (A, C and residuals;
  // B is its last two dims).
  std::vector<int64_t> Of(const std::vector<int64_t>& s) const {
    if (!flat) return s;
    memory::dims d = PadTo(s, y_full.size());
    const int64_t last = d.back();
    d.pop_back();
    const bool repeated = std::all_of(d.begin(), d.end(), [](int64_t x) { return x == 1; });
    return {repeated ? 1 : y[0], last};
  }
};

// Whether `s` padded to `y`'s rank has its dims before the last `trailing` all 1 (`ones`)
// or equal to y's.
bool LeadingMatch(const std::vector<int64_t>& s, const std::vector<int64_t>& y, bool ones,
                  size_t trailing = 1) {
  if (s.size() > y.size()) return false;
  memory::dims d = PadTo(s, y.size());
  for (size_t i = 0; i + trailing < d.size(); ++i) {
    if (d[i] != (ones ? 1 : y[i])) return false;
  }
  return true;
}

Views MakeViews(const BuildContext& ctx, const Node& node, bool trans_a) {
  Views v;
  v.y = v.y_full = ctx.slots[ctx.SlotOf(node.output(0))].shape;
  if (trans_a || v.y.size() < 3 || node.inputs.size() < 2 || NumElements(v.y) == 0) return v;
  const std::vector<int64_t>& as = ctx.slots[ctx.SlotOf(node.input(0))].shape;
  const std::vector<int64_t>& bs = ctx.slots[ctx.SlotOf(node.input(1))].shape;
  if (as.size() < 2 || bs.size() < 2 || !LeadingMatch(as, v.y, false) ||
      !LeadingMatch(bs, v.y, true, 2)) {
    return v;
  }
  for (size_t i = 2; i < node.inputs.size(); ++i) {
    const int s = ctx.SlotOf(node.input(i));
    if (s < 0) continue;
    const std::vector<int64_t>& cs = ctx.slots[s].shape;
    if (!LeadingMatch(cs, v.y, true) && !LeadingMatch(cs, v.y, false)) return v;
  }
  v.flat = true;
  v.y = {NumElements(v.y_full) / v.y_full.back(), v.y_full.back()};
  return v;
}


struct Operands {
  int a = -1, b = -1, c = -1, y = -1;
};

bool AllF32(const BuildContext& ctx, const Node& node) {
  for (const Value* v : node.inputs) {
    if (v && ctx.slots[ctx.SlotOf(v)].dtype != DType::kFloat32) return false;
  }
  return ctx.slots[ctx.SlotOf(node.output(0))].dtype == DType::kFloat32;
}

// C and the epilogue as post-ops: a constant C becomes the bias (scaled by beta), a runtime
// C the first binary add (beta must be 1), residual Adds further binary adds.
struct Epilogue {
  dnnl::post_ops po;
  std::vector<std::pair<int, memory::desc>> binary;  // slot and desc per binary post-op
  memory::desc bias_md;
  std::optional<Tensor> bias;
};

bool AddBinary(BuildContext& ctx, const Value* v, const Views& views, Epilogue& e) {
  const int slot = ctx.SlotOf(v);
  if (slot < 0) return false;
  std::optional<memory::desc> md = BroadcastMd(views.Of(ctx.slots[slot].shape), views.y);
  if (!md) return false;
  e.po.append_binary(dnnl::algorithm::binary_add, *md);
  e.binary.push_back({slot, *md});
  return true;
}

std::optional<Epilogue> ReadEpilogue(BuildContext& ctx, const Node& node, const MatMulSpec& spec,
                                     const Views& views) {
  Epilogue e;
  const Value* c = node.input(2);
  if (c && c->is_constant()) {
    std::optional<memory::desc> md = BroadcastMd(views.Of(ctx.slots[ctx.SlotOf(c)].shape), views.y);
    if (!md) return std::nullopt;
    e.bias = spec.beta == 1.f ? *c->constant : Scaled(*c->constant, spec.beta);
    e.bias_md = *md;
  } else if (c && (spec.beta != 1.f || !AddBinary(ctx, c, views, e))) {
    return std::nullopt;
  }
  size_t next_residual = 3;
  for (const auto& s : spec.steps) {
    if (s.op == "Add") {
      if (!AddBinary(ctx, node.input(next_residual++), views, e)) return std::nullopt;
    } else if (!AppendActivation(e.po, s)) {
      return std::nullopt;
    }
  }
  return e;
}

// Binds the operands that live in slots (and the scratchpad) to the primitive.
void BindSlots(BuildContext& ctx, const Operands& op, const dnnl::matmul::primitive_desc& pd,
               const memory::desc& a_md, const memory::desc& y_md, const Epilogue& e,
               bool flat, DnnlCall& call) {
  // A's plain storage in A's type: float32 as stored, or a bf16 copy made before the product.
  const memory::desc a_plain = ctx.PlainMd(op.a);
  const memory::desc a_read =
      a_md.data_type() == a_plain.data_type()
          ? a_plain
          : memory::desc(a_plain.dims(), a_md.data_type(), PlainTag(a_plain.dims().size()));
  call.Arg(DNNL_ARG_SRC, a_md, ctx.ReadAs(op.a, a_read), ctx.engine);
  // A flattened output is the plain output seen as 2-D: written in place.
  const int dst = ctx.WriteAs(op.y, flat ? ctx.PlainMd(op.y) : y_md);
  call.Arg(DNNL_ARG_DST, y_md, dst, ctx.engine);
  // Binary post-ops are numbered by their position in the whole chain.
  size_t i = 0;
  for (int p = 0; p < e.po.len() && i < e.binary.size(); ++p) {
    if (e.po.kind(p) != dnnl::primitive::kind::binary) continue;
    const int slot = ctx.ReadAs(e.binary[i].first, ctx.PlainMd(e.binary[i].first));
    call.Arg(DNNL_ARG_ATTR_MULTIPLE_POST_OP(p) | DNNL_ARG_SRC_1, e.binary[i].second, slot,
             ctx.engine);
    ++i;
  }
  ctx.NoteScratchpad(pd.scratchpad_desc());
  call.Arg(DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc(), ctx.scratch_slot, ctx.engine);
}

bool ShapesSupported(const std::vector<int64_t>& as, const std::vector<int64_t>& bs,
                     const std::vector<int64_t>& ys) {
  const size_t rank = ys.size();
  return as.size() >= 2 && bs.size() >= 2 && rank >= 2 && rank <= 6 && NumElements(ys) != 0 &&
         as.size() <= rank && bs.size() <= rank;
}

// oneDNN's matmul runs a product only where it is at its best and exact: its brgemm
// implementation (AVX-512 machines; allocation-free per call, unlike the gemm driver it uses
// below AVX-512, which mallocs its packing buffers every call), with post-ops that keep NaN
// and infinities as ONNX computes them (its ReLU and clamps are max/min instructions that
// return the non-NaN operand), in an engine whose runs keep the team it was built with
// (BuildContext::follow_team). Everything else runs on Kiln's GEMM (gemm_kernel.cc).
// KILN_CPU_GEMM=own or =onednn overrides this, to measure either side.
bool KeepOneDnnMatMul(const dnnl::matmul::primitive_desc& pd,
                      const std::vector<kiln_ops::EpilogueStep>& steps) {
  if (ForcedGemm() == "own") return false;
  if (ForcedGemm() == "onednn") return true;
  if (std::string(pd.impl_info_str()).rfind("brg", 0) != 0) return false;
  return std::all_of(steps.begin(), steps.end(), [](const kiln_ops::EpilogueStep& s) {
    return s.op == "Add" || PostOpKeepsNonFinite(s);
  });
}

}  // namespace

std::unique_ptr<CpuKernel> MakeDnnlMatMul(BuildContext& ctx, const Node& node) {
  std::optional<MatMulSpec> spec = ReadMatMulSpec(node);
  if (!spec || !node.input(0) || !node.input(1) || !node.output(0) || !AllF32(ctx, node)) {
    return nullptr;
  }
  // Kiln's GEMM follows each run's team; bf16 products have none there, so they stay on
  // oneDNN (and the engine on the team it was built with).
  if (ctx.follow_team && !spec->bf16 && ForcedGemm() != "onednn") return nullptr;
  Operands op{ctx.SlotOf(node.input(0)), ctx.SlotOf(node.input(1)), ctx.SlotOf(node.input(2)),
              ctx.SlotOf(node.output(0))};
  const Views views = MakeViews(ctx, node, spec->trans_a);
  const std::vector<int64_t>& ys = views.y;
  const std::vector<int64_t> as = views.Of(ctx.slots[op.a].shape);
  std::vector<int64_t> bs = ctx.slots[op.b].shape;
  if (views.flat) bs.erase(bs.begin(), bs.end() - 2);
  if (!ShapesSupported(as, bs, ys)) return nullptr;
  const Value* bv = node.input(1);
  if (spec->alpha != 1.f && !bv->is_constant()) return nullptr;
  memory::dims ad = PadTo(as, ys.size());
  memory::dims bd = PadTo(bs, ys.size());
  if (spec->trans_a) SwapLastTwo(ad);
  if (spec->trans_b) SwapLastTwo(bd);
  const memory::data_type operand_type = spec->bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  const memory::desc a_md = OperandMd(ad, spec->trans_a, operand_type);
  const memory::desc b_store = OperandMd(bd, spec->trans_b);
  // A constant B lets the primitive pick its packed layout (and type); it is reordered once, here.
  const memory::desc b_md =
      bv->is_constant() ? memory::desc(bd, operand_type, memory::format_tag::any) : b_store;
  const memory::desc y_md(ToDims(ys), memory::data_type::f32, PlainTag(ys.size()));
  std::optional<Epilogue> e = ReadEpilogue(ctx, node, *spec, views);
  if (!e) return nullptr;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_post_ops(e->po);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, e->bias_md, y_md), attr,
                                      ctx.engine);
  } catch (const dnnl::error&) {
    return nullptr;
  }
  if (!KeepOneDnnMatMul(pd, spec->steps)) return nullptr;
  auto k = std::make_unique<MatMulKernel>();
  k->call_ = DnnlCall(dnnl::matmul(pd));
  if (bv->is_constant()) {
    Tensor w = spec->alpha == 1.f ? *bv->constant : Scaled(*bv->constant, spec->alpha);
    absl::StatusOr<memory> wm = PrepackConstant(ctx, w, b_store, pd.weights_desc());
    if (!wm.ok()) return nullptr;
    k->call_.Owned(DNNL_ARG_WEIGHTS, *wm);
  } else {
    k->call_.Arg(DNNL_ARG_WEIGHTS, b_md, ctx.ReadAs(op.b, ctx.PlainMd(op.b)), ctx.engine);
  }
  if (e->bias) {
    absl::StatusOr<memory> bm = PrepackConstant(ctx, *e->bias, e->bias_md, e->bias_md);
    if (!bm.ok()) return nullptr;
    k->call_.Owned(DNNL_ARG_BIAS, *bm);
  }
  BindSlots(ctx, op, pd, a_md, y_md, *e, views.flat, k->call_);
  ctx.bf16_ops += spec->bf16;
  return k;
}

}  // namespace kiln::cpu
