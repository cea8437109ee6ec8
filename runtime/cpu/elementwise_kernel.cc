// ai.kiln.FusedElementwise programs and single ai.onnx element-wise ops (float32; a program
// may also dequantize 8/16-bit inputs and quantize its result to one), as one
// tiled loop split across the OpenMP team when large: the output is walked in tiles along
// its innermost dim; each input tile is read
// in place (contiguous), splatted (broadcast) or gathered (strided); rows shorter than a
// quarter tile are packed several to a tile; the instructions run
// tile by tile over small register buffers, in loops simple enough to vectorize. Reading a
// tile completes before its output tile is written, so an in-place plan (out == in) is safe.
#include "runtime/cpu/elementwise_kernel.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "ir/kiln_ops.h"
#include "runtime/cpu/elementwise_ops.h"
#include "runtime/cpu/nonfinite_guard.h"
#include "runtime/cpu/own_kernels.h"
#include "runtime/cpu/quantize_math.h"

namespace kiln::cpu {
namespace {

// Programs that dequantize or quantize (QDQ models) use longer tiles: their 8-bit operands
// are light in memory, and per-tile dispatch was a third of their time at 256 (a
// DQ+DQ->Add->Relu->Q program over [1, 64, 56, 56] u8: 106 us per run at 256, 72 at 1024,
// one thread). Float programs keep 256.
constexpr int64_t kQuantTile = 1024;

using ew::Instr;
using ew::Op;

// What one thread needs to walk part of the output: tile registers, where each operand's
// current tile is, and the odometer over the outer index with every input's offset.
struct Cursor {
  std::vector<float> regs;
  std::vector<const float*> ptrs;
  std::vector<int64_t> index, offsets;
  std::vector<int64_t> filled;  // per periodic operand: the offset its register holds, or -1
  int64_t out_offset = 0;       // a strided output's (OutputView) current row
  // record_bound: the largest |y| this cursor wrote in run `stamp` (+inf for NaN or inf).
  float max_abs = 0.f;
  uint64_t stamp = 0;
};

class ElementwiseKernel : public SharedKernel {
 public:
  bool follows_team() const override { return true; }
  // `out_dtype`: float32, or the integer type a final kQuantize instruction stores.
  ElementwiseKernel(std::vector<Operand> in, std::vector<Instr> prog, int out,
                    std::vector<int64_t> shape, int threads, DType out_dtype, OutputView view,
                    bool record_bound)
      : in_(std::move(in)),
        prog_(std::move(prog)),
        out_(out),
        shape_(std::move(shape)),
        out_dtype_(out_dtype),
        out_size_(static_cast<int64_t>(DTypeSize(out_dtype))),
        view_(std::move(view)),
        record_(record_bound && out_dtype == DType::kFloat32) {
    if (shape_.empty()) shape_ = {1};
    Coalesce();
    inner_ = shape_.back();
    cursors_.resize(static_cast<size_t>(std::max(1, threads)));
    for (const Operand& o : in_) row_loads_ = row_loads_ || (o.used && !o.dense);
    if (out_dtype_ == DType::kFloat32) affine_ = ew::MatchAffineChain(prog_, in_.size());
    for (const Instr& i : prog_) {
      if (i.op == Op::kQuantize || i.op == Op::kDequantize) tile_ = kQuantTile;
    }
    for (const Operand& o : in_) {
      if (o.period > 0) tile_ = o.period >= tile_ ? o.period : tile_ / o.period * o.period;
    }
    for (Cursor& c : cursors_) {
      c.regs.assign((in_.size() + prog_.size()) * tile_, 0.f);
      c.ptrs.assign(in_.size() + prog_.size(), nullptr);
      c.index.assign(shape_.size(), 0);
      c.offsets.assign(in_.size(), 0);
      c.filled.assign(in_.size(), -1);
    }
  }

  // Each thread takes a contiguous range of units (see Units) with its own cursor.
  absl::Status Run(const ExecContext& ctx) override {
    const int64_t total = NumElements(shape_);
    if (total == 0) return absl::OkStatus();
    ForEachChunk(Units(), total >= kParallelElements, static_cast<int>(cursors_.size()),
                 [&](int t, int64_t u0, int64_t u1) { RunUnits(ctx, t, u0, u1); });
    if (const float b = OutputBound(ctx); b <= kSafeBound) ctx.bounds->Set(out_, b);
    return absl::OkStatus();
  }

  float OutputBound(const ExecContext& ctx) const override {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    if (!record_ || !ctx.bounds) return kInf;
    float m = 0.f;  // over the cursors that ran this run (together they wrote every unit)
    for (const Cursor& c : cursors_) {
      if (c.stamp == ctx.bounds->run()) m = std::max(m, c.max_abs);
    }
    return m <= kSafeBound ? m : kInf;
  }

  int64_t Work() const override { return NumElements(shape_); }

  void RunShare(const ExecContext& ctx, int part, int parts) override {
    const int64_t n = NumElements(shape_) == 0 ? 0 : Units();
    const int64_t u0 = n * part / parts, u1 = n * (part + 1) / parts;
    if (u0 < u1) RunUnits(ctx, part, u0, u1);
  }

  int Shares() const override { return static_cast<int>(cursors_.size()); }

 private:
  // Short rows (attention scores, [.., 16]) are packed several to a tile, so the program is
  // dispatched once per tile, not once per row; a strided output's rows are apart in memory
  // and never packed.
  int64_t RowsPerTile() const {
    return inner_ <= tile_ / 4 && view_.strides.empty() ? tile_ / inner_ : 0;
  }

  // The output is cut into units (a tile of packed short rows, or one tile of a long row).
  // Units never share an output element, and each reads its inputs before writing, so
  // in-place stays safe with any split.
  int64_t Units() const {
    const int64_t rows = NumElements(shape_) / inner_, per = RowsPerTile();
    return per > 0 ? (rows + per - 1) / per : rows * ((inner_ + tile_ - 1) / tile_);
  }

  // Units [u0, u1) with thread t's cursor.
  void RunUnits(const ExecContext& ctx, int t, int64_t u0, int64_t u1) {
    char* y = static_cast<char*>(ctx.ptrs[out_]);
    const int64_t rows = NumElements(shape_) / inner_, per = RowsPerTile();
    Cursor& c = cursors_[t];
    if (record_ && ctx.bounds) {
      c.stamp = ctx.bounds->run();
      c.max_abs = 0.f;
    }
    if (per > 0) {
      Seek(c, u0 * per);
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t r0 = u * per, k = std::min(per, rows - r0);
        LoadRows(ctx, c, r0, k);
        Compute(c, y + r0 * inner_ * out_size_, k * inner_);
        Record(c, y + r0 * inner_ * out_size_, k * inner_);
      }
      return;
    }
    const bool strided = !view_.strides.empty();
    const int64_t tiles = (inner_ + tile_ - 1) / tile_;  // per row
    int64_t row = u0 / tiles, tile = u0 % tiles;         // no division per tile
    Seek(c, row);
    std::fill(c.filled.begin(), c.filled.end(), -1);  // inputs change per run
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t t0 = tile * tile_, n = std::min(tile_, inner_ - t0);
      LoadInputs(ctx, c, t0, n);
      const int64_t at = strided ? c.out_offset + t0 : row * inner_ + t0;
      Compute(c, y + at * out_size_, n);
      Record(c, y + at * out_size_, n);
      if (++tile == tiles && u + 1 < u1) {
        tile = 0;
        ++row;
        Advance(c);
      }
    }
  }

  float* Reg(Cursor& c, size_t r) const { return c.regs.data() + r * tile_; }

  // Merges adjacent dims that every operand walks as one (stride[d] == stride[d + 1] *
  // size[d + 1], zeros included): a per-channel operand of a plain [8, 224, 56, 56] makes
  // rows of 3136 instead of 56, each row one dispatch and one odometer step (BatchNorm as
  // Mul+Add+Relu there: 1.8 ms, a Relu alone 0.38 ms). Periodic operands
  // (MergeSpatialIntoRows) have their rows already.
  void Coalesce() {
    for (const Operand& o : in_) {
      if (o.period > 0 || o.strides.size() != shape_.size()) return;
    }
    std::vector<std::vector<int64_t>*> all;
    for (Operand& o : in_) all.push_back(&o.strides);
    if (!view_.strides.empty()) all.push_back(&view_.strides);
    for (int64_t d = static_cast<int64_t>(shape_.size()) - 2; d >= 0; --d) {
      bool joint = true;
      for (const auto* s : all) joint = joint && (*s)[d] == (*s)[d + 1] * shape_[d + 1];
      if (!joint) continue;
      shape_[d] *= shape_[d + 1];
      shape_.erase(shape_.begin() + d + 1);
      for (auto* s : all) {
        (*s)[d] = (*s)[d + 1];
        s->erase(s->begin() + d + 1);
      }
    }
  }

  // n elements of a converted input, from element `start` with stride `stride`, as floats.
  static void Convert(const ExecContext& ctx, const Operand& o, int64_t start, int64_t stride,
                      float* dst, int64_t n) {
    const void* base = ctx.ptrs[o.slot];
    if (stride == 1 &&
        ew::WidenToFloat(o.dtype, static_cast<const char*>(base) + start * DTypeSize(o.dtype), dst, n)) {
      return;
    }
    o.to_float(base, start, stride, dst, n);
  }

  void LoadInputs(const ExecContext& ctx, Cursor& c, int64_t t0, int64_t n) {
    for (size_t k = 0; k < in_.size(); ++k) {
      if (!in_[k].used) continue;
      if (in_[k].to_float) {
        const int64_t s = in_[k].strides.back();
        Convert(ctx, in_[k], c.offsets[k] + t0 * s, s, Reg(c, k), n);
        c.ptrs[k] = Reg(c, k);
        continue;
      }
      const float* base = static_cast<const float*>(ctx.ptrs[in_[k].slot]) + c.offsets[k];
      const int64_t s = in_[k].strides.back();
      if (in_[k].period > 0 || s == 0) {
        // The same tile all along the row (a periodic operand: every tile starts at a whole
        // period; a broadcast one: one value), filled once per row, not once per tile.
        float* r = Reg(c, k);
        if (c.filled[k] != c.offsets[k]) {
          const int64_t p = std::max<int64_t>(in_[k].period, 1);
          for (int64_t i = 0; i < p; ++i) r[i] = base[i * s];
          if (p == 1) {
            std::fill(r + 1, r + tile_, r[0]);
          } else {
            for (int64_t i = p; i < tile_; ++i) r[i] = r[i - p];
          }
          c.filled[k] = c.offsets[k];
        }
        c.ptrs[k] = r;
        continue;
      }
      if (s == 1) {
        c.ptrs[k] = base + t0;  // contiguous: read in place
        continue;
      }
      float* r = Reg(c, k);
      for (int64_t i = 0; i < n; ++i) r[i] = base[(t0 + i) * s];
      c.ptrs[k] = r;
    }
  }

  // Rows [r0, r0 + count) of every input: in place when the input is laid out like the
  // output (converted in one piece when it is not float), else row by row into its register
  // (advancing the row odometer; not needed when no input is read that way).
  void LoadRows(const ExecContext& ctx, Cursor& c, int64_t r0, int64_t count) {
    for (size_t k = 0; k < in_.size(); ++k) {
      if (!in_[k].used) continue;
      if (in_[k].dense && in_[k].to_float) {
        Convert(ctx, in_[k], r0 * inner_, 1, Reg(c, k), count * inner_);
        c.ptrs[k] = Reg(c, k);
        continue;
      }
      const float* base = static_cast<const float*>(ctx.ptrs[in_[k].slot]) + in_[k].base;
      c.ptrs[k] = in_[k].dense ? base + r0 * inner_ : Reg(c, k);
    }
    for (int64_t r = 0; r < count && row_loads_; ++r) {
      for (size_t k = 0; k < in_.size(); ++k) {
        if (in_[k].dense || !in_[k].used) continue;
        if (in_[k].to_float) {
          Convert(ctx, in_[k], c.offsets[k], in_[k].strides.back(), Reg(c, k) + r * inner_, inner_);
          continue;
        }
        const float* src = static_cast<const float*>(ctx.ptrs[in_[k].slot]) + c.offsets[k];
        const int64_t s = in_[k].strides.back();
        float* dst = Reg(c, k) + r * inner_;
        if (s == 1) {
          std::memcpy(dst, src, inner_ * sizeof(float));
        } else if (s == 0) {
          std::fill(dst, dst + inner_, *src);
        } else {
          for (int64_t i = 0; i < inner_; ++i) dst[i] = src[i * s];
        }
      }
      Advance(c);
    }
  }

  // Folds the largest |y| of a tile just written (still in cache) into the cursor's.
  void Record(Cursor& c, const char* y, int64_t n) const {
    if (record_)
      c.max_abs = std::max(c.max_abs, FiniteMaxAbs(reinterpret_cast<const float*>(y), n));
  }

  // Runs the program over `n` loaded elements; the last result goes to `y` (through its
  // register and a conversion when the output is an integer type).
  void Compute(Cursor& c, void* y, int64_t n) {
    if (affine_) {
      const ew::AffineChain& f = *affine_;
      ew::AffineTile(f, c.ptrs[f.x], f.scale >= 0 ? c.ptrs[f.scale] : nullptr,
                     f.shift >= 0 ? c.ptrs[f.shift] : nullptr, static_cast<float*>(y), n);
      return;
    }
    const bool float_out = out_dtype_ == DType::kFloat32;
    for (size_t i = 0; i < prog_.size(); ++i) {
      const Instr& ins = prog_[i];
      const size_t r = in_.size() + i;
      float* dst = i + 1 == prog_.size() && float_out ? static_cast<float*>(y) : Reg(c, r);
      const float* a = c.ptrs[ins.args[0]];
      if (ins.op == Op::kClip) {
        ew::ClipTile(a, ins.args.size() > 1 ? c.ptrs[ins.args[1]] : nullptr,
                 ins.args.size() > 2 ? c.ptrs[ins.args[2]] : nullptr, dst, n);
      } else if (ins.args.size() == 2) {
        ew::Binary(ins.op, a, c.ptrs[ins.args[1]], dst, n);
      } else {
        ew::Unary(ins, a, dst, n);
      }
      c.ptrs[r] = dst;
    }
    if (!float_out) ew::StoreIntegers(out_dtype_, c.ptrs.back(), y, n);
  }

  // Puts the outer index (all dims but the innermost) at row `row`, with every input's offset.
  void Seek(Cursor& c, int64_t row) {
    for (size_t k = 0; k < in_.size(); ++k) c.offsets[k] = in_[k].base;
    c.out_offset = view_.base;
    for (int64_t d = static_cast<int64_t>(shape_.size()) - 2; d >= 0; --d) {
      c.index[d] = row % shape_[d];
      row /= shape_[d];
      for (size_t k = 0; k < in_.size(); ++k) c.offsets[k] += c.index[d] * in_[k].strides[d];
      if (!view_.strides.empty()) c.out_offset += c.index[d] * view_.strides[d];
    }
  }

  // Steps the outer index and each input's offset by one row.
  void Advance(Cursor& c) {
    const bool strided = !view_.strides.empty();
    for (int64_t d = static_cast<int64_t>(shape_.size()) - 2; d >= 0; --d) {
      ++c.index[d];
      for (size_t k = 0; k < in_.size(); ++k) c.offsets[k] += in_[k].strides[d];
      if (strided) c.out_offset += view_.strides[d];
      if (c.index[d] < shape_[d]) return;
      for (size_t k = 0; k < in_.size(); ++k) c.offsets[k] -= in_[k].strides[d] * shape_[d];
      if (strided) c.out_offset -= view_.strides[d] * shape_[d];
      c.index[d] = 0;
    }
  }

  std::vector<Operand> in_;
  std::vector<Instr> prog_;
  int out_;
  std::vector<int64_t> shape_;
  DType out_dtype_;
  int64_t out_size_;  // bytes per output element
  int64_t inner_ = 1;
  bool row_loads_ = false;  // some input is read row by row (not laid out like the output)
  int64_t tile_ = kTile;    // elements per tile (kQuantTile for QDQ programs)
  std::vector<Cursor> cursors_;  // one per thread of the team the engine was built for
  OutputView view_;              // strided output; empty strides: dense
  std::optional<ew::AffineChain> affine_;  // the program as one pass (float output only)
  bool record_ = false;                    // the output's largest |y| taken per run
};

}  // namespace

std::unique_ptr<SharedKernel> NewElementwiseKernel(std::vector<Operand> in, std::vector<Instr> prog,
                                                   int out, std::vector<int64_t> shape,
                                                   DType out_dtype, OutputView view,
                                                   bool record_bound) {
  return std::make_unique<ElementwiseKernel>(std::move(in), std::move(prog), out, std::move(shape),
                                             omp_get_max_threads(), out_dtype, std::move(view),
                                             record_bound);
}

std::optional<std::vector<int64_t>> BroadcastStrides(const std::vector<int64_t>& in,
                                                     const std::vector<int64_t>& out) {
  std::vector<int64_t> o = out.empty() ? std::vector<int64_t>{1} : out;
  if (in.size() > o.size()) return std::nullopt;
  std::vector<int64_t> strides(o.size(), 0);
  int64_t s = 1;
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t d = o.size() - 1 - i;
    const int64_t n = in[in.size() - 1 - i];
    if (n != 1 && n != o[d]) return std::nullopt;
    strides[d] = n == 1 ? 0 : s;
    s *= n;
  }
  return strides;
}

std::unique_ptr<CpuKernel> MakeElementwiseKernel(BuildContext& ctx, const Node& node) {
  // Operand 0 spans several inputs: the factories below map input k to operand k.
  if (kiln_ops::ConcatInputs(node) != 0) return MakeConcatProgram(ctx, node);
  std::optional<std::vector<Instr>> prog = ReadInstrs(node);
  const int out = ctx.SlotOf(node.output(0));
  if (!prog || prog->empty() || out < 0) return nullptr;
  // Float32, or an integer output a final QuantizeLinear computes (ReadInstrs checked that
  // its type is the program's).
  const DType out_dtype = ctx.slots[out].dtype;
  if (out_dtype != DType::kFloat32 && prog->back().op != Op::kQuantize) return nullptr;
  if (auto k = MakeSameLayoutQuantized(ctx, node, *prog, out, out_dtype)) return k;
  if (out_dtype == DType::kFloat32) {
    if (auto k = MakeLayoutElementwise(ctx, node, *prog, out)) return k;
  }
  const std::vector<int64_t> shape = ctx.slots[out].shape;
  std::vector<Operand> in;
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const int s = ctx.SlotOf(node.inputs[k]);
    if (s < 0) return nullptr;
    std::optional<std::vector<int64_t>> strides = BroadcastStrides(ctx.slots[s].shape, shape);
    if (!strides) return nullptr;
    if (!ReadsOperand(*prog, static_cast<int>(k))) {  // a scale or zero point the instruction holds
      Operand o{s, *strides, false, nullptr};
      o.used = false;
      in.push_back(std::move(o));
      continue;
    }
    const DType dt = ctx.slots[s].dtype;
    const CastFn to_float = dt == DType::kFloat32 ? nullptr : CastFor(dt, DType::kFloat32);
    if (dt != DType::kFloat32 && (!to_float || !OnlyConvertingReads(*prog, static_cast<int>(k)))) {
      return nullptr;
    }
    const bool dense = NumElements(ctx.slots[s].shape) == NumElements(shape);
    Operand o{s, *strides, dense, to_float};
    o.dtype = dt;
    in.push_back(std::move(o));
  }
  // A value computed in the program is float; a cast may only read a converted input, and a
  // DequantizeLinear an 8/16-bit input of its zero point's type (int32 would not convert to
  // float exactly).
  for (const Instr& i : *prog) {
    if (i.op != Op::kCast && i.op != Op::kDequantize) continue;
    if (i.args[0] >= static_cast<int>(in.size())) return nullptr;
    if (i.op == Op::kDequantize) {
      const Value* x = node.inputs[i.args[0]];
      float lo, hi;
      if (!qmath::Range(x->dtype, &lo, &hi)) return nullptr;
    }
  }
  for (Operand& o : in) {
    if (o.used && !ctx.slots[o.slot].is_plain()) o.slot = ctx.ReadAs(o.slot, ctx.PlainMd(o.slot));
  }
  return NewElementwiseKernel(std::move(in), std::move(*prog), out, shape, out_dtype, {},
                              ctx.slots[out].blocked_ok);
}

}  // namespace kiln::cpu
