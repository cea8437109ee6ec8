// MatMul, Gemm and ai.kiln.FusedMatMul on Kiln's own GEMM (gemm.h). Batch dims broadcast
// (a dim of 1 repeats); a product whose B is one matrix and whose A rows are contiguous runs
// as one tall product. A constant B is packed once at build (alpha folded in); a runtime B is
// packed per run into the engine's arena, except for a product of a few rows with a runtime B
// read transposed (attention scores at decode, q . K^T), which takes dot products with B's rows
// where they are (row_dot.h) instead of packing (transposing) them. The epilogue (beta * C,
// residual Adds, activations) runs on each finished tile with the own element-wise ops, which keep
// NaN.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/aligned.h"
#include "ir/kiln_ops.h"
#include "runtime/cpu/axpy_rows.h"
#include "runtime/cpu/elementwise_ops.h"
#include "runtime/cpu/epilogue_ops.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/matmul_spec.h"
#include "runtime/cpu/own_kernels.h"
#include "runtime/cpu/row_dot.h"

namespace kiln::cpu {
namespace {

using Floats = AlignedPtr<float>;

Floats AlignedFloats(int64_t n) {
  return NewAlignedBuffer<float>(static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float));
}

// An epilogue operand over the output's index space [batch..., M, N]: element strides per
// batch dim (0 where it repeats), per row and per column.
struct Operand {
  int slot = -1;
  Floats held;  // a constant operand, scaled
  std::vector<int64_t> batch;
  int64_t rs = 0, cs = 0;
};

struct Step {
  bool add = true;
  Operand operand;             // an Add
  EpilogueActivation act;      // otherwise
};

class GemmKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  absl::Status Run(const ExecContext& ctx) override;
  void BindTile() {
    tile_ = [this](int64_t p, int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
      Epilogue(p, i0, rows, j0, cols);
    };
  }

  gemm::Blocking bl;
  int64_t m = 0, n = 0, k = 0;
  std::vector<int64_t> batch_dims;          // one product per index (empty: one product)
  int a_slot = -1, b_slot = -1, y_slot = -1;
  std::vector<int64_t> a_batch, b_matrix;   // per batch dim: A element / packed-B matrix strides
  int64_t a_rs = 0, a_cs = 0, b_rs = 0, b_cs = 0;
  float alpha = 1.f;
  const float* b_packed = nullptr;           // constant B, packed at build (ctx.packed_weights)
  int b_pack_slot = -1;                     // runtime B: packed here every run
  int64_t b_count = 1, b_floats = 0, b_src_matrix = 0;
  int a_pack_slot = -1;
  bool few_rows = false;   // B read where it is, not packed (RunFewRows)
  bool b_rows_dot = true;  // few_rows: B's rows are dotted (B transposed) or summed (axpys)
  int threads = 1;
  std::vector<Step> steps;
  std::vector<gemm::Problem> problems;

 private:
  void Epilogue(int64_t p, int64_t i0, int64_t rows, int64_t j0, int64_t cols) const;
  void RunFewRows(const float* a, const float* b, float* y) const;
  void AxpyFewRows(const float* a, const float* b, float* y) const;
  int64_t Offset(const std::vector<int64_t>& strides, int64_t p) const {
    int64_t off = 0;
    for (int64_t d = static_cast<int64_t>(batch_dims.size()) - 1; d >= 0; --d) {
      off += (p % batch_dims[d]) * strides[d];
      p /= batch_dims[d];
    }
    return off;
  }

  const ExecContext* ctx_ = nullptr;  // during Run, for the epilogue
  gemm::TileFn tile_;
};

void GemmKernel::Epilogue(int64_t p, int64_t i0, int64_t rows, int64_t j0, int64_t cols) const {
  float* y = static_cast<float*>(ctx_->ptrs[y_slot]) + p * m * n;
  for (const Step& s : steps) {
    const float* src = nullptr;
    if (s.add) {
      src = s.operand.held ? s.operand.held.get()
                           : static_cast<const float*>(ctx_->ptrs[s.operand.slot]);
      src += Offset(s.operand.batch, p) + j0 * s.operand.cs;
    }
    for (int64_t i = i0; i < i0 + rows; ++i) {
      float* row = y + i * n + j0;
      if (!s.add) {
        ApplyActivation(s.act, row, cols);
      } else if (s.operand.cs == 1) {
        ew::Binary(ew::Op::kAdd, row, src + i * s.operand.rs, row, cols);
      } else {
        const float v = src[i * s.operand.rs];
        for (int64_t j = 0; j < cols; ++j) row[j] += v;
      }
    }
  }
}

// y (m x n) = alpha * A B for a B stored as it multiplies ([k, n], row-major): axpys over
// B's rows, up to kMaxAxpyRows of A's rows sharing each read of B (an attention's
// probabilities times the cached values, one query row per head).
void GemmKernel::AxpyFewRows(const float* a, const float* b, float* y) const {
  std::fill_n(y, m * n, 0.f);
  for (int64_t i0 = 0; i0 < m; i0 += kMaxAxpyRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kMaxAxpyRows, m - i0));
    const float* in[kMaxAxpyRows];
    float* out[kMaxAxpyRows];
    for (int r = 0; r < rows; ++r) {
      in[r] = a + (i0 + r) * a_rs;
      out[r] = y + (i0 + r) * n;
    }
    AxpyRowsMulti(in, rows, k, b, n, out, n);
  }
  if (alpha != 1.f) {
    for (int64_t i = 0; i < m * n; ++i) y[i] *= alpha;
  }
}

// Per product, each of its rows takes n dot products with B's rows (or axpys over them),
// then the epilogue.
void GemmKernel::RunFewRows(const float* a, const float* b, float* y) const {
  const int64_t count = static_cast<int64_t>(problems.size());
  const Isa isa = ActiveIsa();
  ForEachIndex(count, count > 1 && count * m * n * k >= kParallelElements, [&](int64_t p) {
    const float* bp = b + Offset(b_matrix, p) * b_src_matrix;
    const float* ap = a + Offset(a_batch, p);
    if (b_rows_dot) {
      for (int64_t i = 0; i < m; ++i)
        RowDot(isa, ap + i * a_rs, bp, k, k, n, alpha, y + (p * m + i) * n);
    } else {
      AxpyFewRows(ap, bp, y + p * m * n);
    }
    if (!steps.empty()) Epilogue(p, 0, m, 0, n);
  });
}

absl::Status GemmKernel::Run(const ExecContext& ctx) {
  ctx_ = &ctx;
  const float* a = static_cast<const float*>(ctx.ptrs[a_slot]);
  float* y = static_cast<float*>(ctx.ptrs[y_slot]);
  if (few_rows) {
    RunFewRows(a, static_cast<const float*>(ctx.ptrs[b_slot]), y);
    ctx_ = nullptr;
    return absl::OkStatus();
  }
  float* packed = b_packed ? const_cast<float*>(b_packed) : static_cast<float*>(ctx.ptrs[b_pack_slot]);
  if (!b_packed) {
    const float* b = static_cast<const float*>(ctx.ptrs[b_slot]);
    ForEachIndex(b_count, b_count > 1 && b_count * k * n >= kParallelElements, [&](int64_t i) {
      gemm::PackB(bl, {b + i * b_src_matrix, b_rs, b_cs}, k, n, 1.f, packed + i * b_floats);
    });
  }
  for (size_t p = 0; p < problems.size(); ++p) {
    gemm::Problem& pr = problems[p];
    pr.a = {a + Offset(a_batch, static_cast<int64_t>(p)), a_rs, a_cs};
    pr.b_packed = packed + Offset(b_matrix, static_cast<int64_t>(p)) * b_floats;
    pr.c = y + static_cast<int64_t>(p) * m * n;
    pr.ldc = n;
    pr.alpha = b_packed ? 1.f : alpha;
  }
  gemm::Run(bl, problems.data(), static_cast<int64_t>(problems.size()), m, n, k,
            /*parallel=*/true, threads, static_cast<float*>(ctx.ptrs[a_pack_slot]),
            steps.empty() ? gemm::TileFn() : tile_);
  ctx_ = nullptr;
  return absl::OkStatus();
}

// ---- building ----

std::vector<int64_t> Prod(const std::vector<int64_t>& dims, size_t from, size_t to) {
  return std::vector<int64_t>(dims.begin() + from, dims.begin() + to);
}

// Matrix strides of a [batch..., rows, cols] operand over the output's batch dims, in units
// of `unit` (0 where the operand's dim is 1); nullopt if it does not broadcast.
std::optional<std::vector<int64_t>> BatchStrides(const std::vector<int64_t>& shape,
                                                 const std::vector<int64_t>& out_batch,
                                                 int64_t unit) {
  std::vector<int64_t> own = Prod(shape, 0, shape.size() - 2);
  std::optional<std::vector<int64_t>> s = BroadcastStrides(own, out_batch);
  if (!s) return std::nullopt;
  for (int64_t& v : *s) v *= unit;
  return s;
}

// The output seen as [batch..., M, N]: a 1-D A or B is a matrix with one row or column.
struct Geometry {
  std::vector<int64_t> a, b, batch;
  int64_t m = 0, n = 0, k = 0;
};

std::optional<Geometry> ReadGeometry(std::vector<int64_t> as, std::vector<int64_t> bs,
                                     const std::vector<int64_t>& ys, const MatMulSpec& spec) {
  if (as.empty() || bs.empty()) return std::nullopt;
  // A transposed operand swaps its last two dims (a vector has none to swap).
  if ((spec.trans_a && as.size() < 2) || (spec.trans_b && bs.size() < 2)) return std::nullopt;
  Geometry g;
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  g.m = spec.trans_a ? as.back() : as[as.size() - 2];
  g.k = spec.trans_a ? as[as.size() - 2] : as.back();
  g.n = spec.trans_b ? bs[bs.size() - 2] : bs.back();
  const int64_t kb = spec.trans_b ? bs.back() : bs[bs.size() - 2];
  if (kb != g.k) return std::nullopt;
  const size_t rank = std::max(as.size(), bs.size());
  g.batch.assign(rank - 2, 1);
  for (const auto* s : {&as, &bs}) {
    for (size_t i = 0; i + 2 < s->size(); ++i) {
      int64_t& d = g.batch[rank - s->size() + i];
      const int64_t v = (*s)[i];
      if (d != 1 && v != 1 && d != v) return std::nullopt;
      if (v != 1) d = v;
    }
  }
  int64_t total = g.m * g.n;
  for (int64_t d : g.batch) total *= d;
  if (total != NumElements(ys) || total == 0) return std::nullopt;
  g.a = as;
  g.b = bs;
  return g;
}

// An Add operand (shape `shape`) over [batch..., M, N]; in a flattened product (rows of all
// batches as one M) its rows must either repeat or follow each other.
bool PlaceOperand(const std::vector<int64_t>& shape, const Geometry& g, bool flat, Operand& op) {
  std::vector<int64_t> full = g.batch;
  full.push_back(g.m);
  full.push_back(g.n);
  std::optional<std::vector<int64_t>> s = BroadcastStrides(shape, full);
  if (!s) return false;
  op.cs = s->back();
  op.rs = (*s)[s->size() - 2];
  op.batch.assign(s->begin(), s->end() - 2);
  if (op.cs > 1) return false;
  if (!flat) return true;
  // One row per product: its size-1 dim reads as broadcast (stride 0), but the tall
  // product's rows are the batch's entries, as far apart as the innermost batch dim says.
  if (g.m == 1 && !op.batch.empty()) op.rs = op.batch.back();
  int64_t expect = op.rs * g.m;
  for (int64_t d = static_cast<int64_t>(g.batch.size()) - 1; d >= 0; --d) {
    const bool repeats = op.batch[d] == 0 && op.rs == 0;
    if (!repeats && op.batch[d] != expect) return false;
    expect *= g.batch[d];
  }
  op.batch.clear();
  return true;
}

bool AddOperand(BuildContext& ctx, const Value* v, float scale, const Geometry& g, bool flat,
                std::vector<Step>& steps) {
  const int slot = ctx.SlotOf(v);
  if (slot < 0 || ctx.slots[slot].dtype != DType::kFloat32) return false;
  Step s;
  if (!PlaceOperand(ctx.slots[slot].shape, g, flat, s.operand)) return false;
  if (v->is_constant() || scale != 1.f) {
    if (!v->is_constant()) return false;  // a runtime C with beta != 1
    const Tensor& t = *v->constant;
    s.operand.held = AlignedFloats(t.numel());
    const float* src = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) s.operand.held.get()[i] = scale * src[i];
  } else {
    s.operand.slot = ctx.ReadAs(slot, ctx.PlainMd(slot));
  }
  steps.push_back(std::move(s));
  return true;
}

bool AddActivation(const kiln_ops::EpilogueStep& e, std::vector<Step>& steps) {
  std::optional<EpilogueActivation> act = MakeEpilogueActivation(e);
  if (!act) return false;
  Step s;
  s.add = false;
  s.act = *act;
  steps.push_back(std::move(s));
  return true;
}

// The epilogue: beta * C, then the fused steps in order; false if a step is not available.
bool ReadSteps(BuildContext& ctx, const Node& node, const MatMulSpec& spec, const Geometry& g,
               bool flat, std::vector<Step>& steps) {
  if (const Value* c = node.input(2); c && !AddOperand(ctx, c, spec.beta, g, flat, steps)) {
    return false;
  }
  size_t residual = 3;
  for (const kiln_ops::EpilogueStep& e : spec.steps) {
    const bool ok = e.op == "Add" ? AddOperand(ctx, node.input(residual++), 1.f, g, flat, steps)
                                  : AddActivation(e, steps);
    if (!ok) return false;
  }
  return true;
}

// B packed at build (constant) or into an arena temp each run.
bool SetUpB(BuildContext& ctx, const Value* bv, const Geometry& g, const MatMulSpec& spec,
            GemmKernel& kern) {
  const std::vector<int64_t> own_batch = Prod(g.b, 0, g.b.size() - 2);
  kern.b_count = NumElements(own_batch);
  kern.b_floats = gemm::PackedBFloats(kern.bl, g.k, g.n);
  kern.b_src_matrix = g.k * g.n;
  kern.b_rs = spec.trans_b ? 1 : g.n;
  kern.b_cs = spec.trans_b ? g.k : 1;
  if (!bv->is_constant()) {
    const int slot = ctx.SlotOf(bv);
    kern.b_slot = ctx.ReadAs(slot, ctx.PlainMd(slot));
    if (kern.few_rows) return true;  // read where it is
    kern.b_pack_slot = ctx.AddTemp(dnnl::memory::desc({kern.b_count * kern.b_floats},
                                                      dnnl::memory::data_type::f32,
                                                      dnnl::memory::format_tag::a));
    return true;
  }
  // The packed bytes depend on the blocking, the product's k and n, B's strides and alpha:
  // not on M, so a model's batch buckets share one packed copy.
  const float* b = bv->constant->data<float>();
  uint32_t alpha_bits;
  std::memcpy(&alpha_bits, &spec.alpha, sizeof alpha_bits);
  const std::string layout = absl::StrCat("gemm-b:", static_cast<int>(kern.bl.isa), ",", kern.bl.mr,
                                          ",", kern.bl.nr, ",", kern.bl.kc, ",", kern.bl.mc, ",",
                                          g.k, ",", g.n, ",", kern.b_rs, ",", kern.b_cs, ",",
                                          kern.b_count, ",", alpha_bits);
  const size_t bytes = static_cast<size_t>(kern.b_count * kern.b_floats) * sizeof(float);
  std::shared_ptr<void> packed = SharedPack(ctx, *bv->constant, layout, bytes, [&](void* dst) {
    float* out = static_cast<float*>(dst);
    for (int64_t i = 0; i < kern.b_count; ++i) {
      gemm::PackB(kern.bl, {b + i * kern.b_src_matrix, kern.b_rs, kern.b_cs}, g.k, g.n,
                  spec.alpha, out + i * kern.b_floats);
    }
  });
  kern.b_packed = static_cast<const float*>(packed.get());
  return true;
}

bool AllF32(const BuildContext& ctx, const Node& node) {
  for (const Value* v : node.inputs) {
    if (v && (ctx.SlotOf(v) < 0 || ctx.slots[ctx.SlotOf(v)].dtype != DType::kFloat32)) return false;
  }
  return node.output(0) && ctx.SlotOf(node.output(0)) >= 0 &&
         ctx.slots[ctx.SlotOf(node.output(0))].dtype == DType::kFloat32;
}

// A product of at most this many rows per matrix with a runtime B reads B where it is:
// packing would read it twice (and transpose it), for too few rows to pay back. A B read
// transposed takes dot products with its rows (the keys of a decode step's scores), one read
// as it is axpys over its rows (the values), where oneDNN's matmul does not take it: on the
// decode step of a GPT-2-small-size model at 8 rows and a past of 384 (AVX-512, one thread),
// the values' products took 12.5 ms packed, 1.9 ms as axpys and 1.7 ms on oneDNN's brgemm.
constexpr int64_t kFewRows = 8;

// The kernel for `node`; with `few_rows_only`, only when it reads B where it is.
std::unique_ptr<CpuKernel> BuildGemm(BuildContext& ctx, const Node& node, bool few_rows_only) {
  std::optional<MatMulSpec> spec = ReadMatMulSpec(node);
  if (!spec || !node.input(0) || !node.input(1) || !AllF32(ctx, node)) return nullptr;
  const int as = ctx.SlotOf(node.input(0)), bs = ctx.SlotOf(node.input(1));
  const int ys = ctx.SlotOf(node.output(0));
  std::optional<Geometry> g =
      ReadGeometry(ctx.slots[as].shape, ctx.slots[bs].shape, ctx.slots[ys].shape, *spec);
  if (!g) return nullptr;
  auto kern = std::make_unique<GemmKernel>();
  kern->bl = gemm::BlockingFor(ActiveIsa());
  kern->threads = std::max(1, omp_get_max_threads());
  kern->alpha = spec->alpha;
  kern->a_rs = spec->trans_a ? 1 : g->k;
  kern->a_cs = spec->trans_a ? g->m : 1;
  std::optional<std::vector<int64_t>> ab = BatchStrides(g->a, g->batch, g->m * g->k);
  std::optional<std::vector<int64_t>> bb = BatchStrides(g->b, g->batch, 1);
  if (!ab || !bb) return nullptr;
  // One tall product when B is a single matrix and A's batches follow each other.
  bool flat = !g->batch.empty() && !spec->trans_a &&
              std::all_of(bb->begin(), bb->end(), [](int64_t v) { return v == 0; });
  for (int64_t d = static_cast<int64_t>(g->batch.size()) - 1, e = g->m * g->k; flat && d >= 0; --d) {
    flat = (*ab)[d] == e;
    e *= g->batch[d];
  }
  if (flat && !ReadSteps(ctx, node, *spec, *g, true, kern->steps)) {
    flat = false;
    kern->steps.clear();
  }
  if (!flat && !ReadSteps(ctx, node, *spec, *g, false, kern->steps)) return nullptr;
  // The values' axpys only where oneDNN's matmul declined first (MakeGemmKernel runs after it):
  // on oneDNN's brgemm that product is a little faster.
  kern->few_rows = !spec->trans_a && !flat && !node.input(1)->is_constant() && g->m <= kFewRows &&
                   (spec->trans_b || !few_rows_only);
  kern->b_rows_dot = spec->trans_b;
  if (few_rows_only && !kern->few_rows) return nullptr;
  kern->m = flat ? NumElements(g->batch) * g->m : g->m;
  kern->n = g->n;
  kern->k = g->k;
  if (!flat) {
    kern->batch_dims = g->batch;
    kern->a_batch = *ab;
    kern->b_matrix = *bb;
  }
  if (!SetUpB(ctx, node.input(1), *g, *spec, *kern)) return nullptr;
  kern->a_slot = ctx.ReadAs(as, ctx.PlainMd(as));
  kern->y_slot = ctx.WriteAs(ys, ctx.PlainMd(ys));
  if (!kern->few_rows)
    kern->a_pack_slot =
        ctx.AddTemp(dnnl::memory::desc({kern->threads * gemm::APackFloats(kern->bl)},
                                       dnnl::memory::data_type::f32, dnnl::memory::format_tag::a));
  kern->problems.resize(flat ? 1 : NumElements(g->batch));
  kern->BindTile();
  return kern;
}

}  // namespace

std::unique_ptr<CpuKernel> MakeGemmKernel(BuildContext& ctx, const Node& node) {
  return BuildGemm(ctx, node, false);
}

std::unique_ptr<CpuKernel> MakeFewRowsKernel(BuildContext& ctx, const Node& node) {
  if (ForcedGemm() == "onednn") return nullptr;  // every product oneDNN can take goes to it
  return BuildGemm(ctx, node, true);
}

}  // namespace kiln::cpu
