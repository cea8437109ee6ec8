// ai.kiln.FusedElementwise programs and single ai.onnx element-wise ops (float32; a program
// may also dequantize 8/16-bit inputs and quantize its result to one), as one
// tiled loop split across the OpenMP team when large: the output is walked in tiles along
// its innermost dim; each input tile is read
// in place (contiguous), splatted (broadcast) or gathered (strided); rows shorter than a
// quarter tile are packed several to a tile; the instructions run
// tile by tile over small register buffers, in loops simple enough to vectorize. Reading a
// tile completes before its output tile is written, so an in-place plan (out == in) is safe.
#include <cmath>
#include <cstring>

#include "ir/kiln_ops.h"
#include "runtime/cpu/elementwise_ops.h"
#include "runtime/cpu/own_kernels.h"
#include "runtime/cpu/quantize_math.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kTile = 256;
// Programs that dequantize or quantize (QDQ models) use longer tiles: their 8-bit operands
// are light in memory, and per-tile dispatch was a third of their time at 256 (a
// DQ+DQ->Add->Relu->Q program over [1, 64, 56, 56] u8: 106 us per run at 256, 72 at 1024,
// one thread). Float programs keep 256.
constexpr int64_t kQuantTile = 1024;

using ew::Instr;
using ew::Op;

struct Operand {
  int slot;
  std::vector<int64_t> strides;  // element strides in the output's index space (0: broadcast)
  bool dense = false;            // laid out exactly like the output (same linear offsets)
  // Set only for an input that is not float32, which the program casts to float before any
  // other use (an attention mask: Cast -> Sub -> Mul), or dequantizes (an 8/16-bit tensor of a
  // QDQ model): it is converted as it is loaded.
  CastFn to_float = nullptr;
  DType dtype = DType::kFloat32;  // the input's type (set with to_float)
  // False for an input no instruction reads as data (the constant scale and zero point of a
  // Q/DQ instruction, which the instruction carries): never loaded.
  bool used = true;
  // > 0: the operand repeats along the innermost dim with this period (a per-channel operand
  // once the spatial dims are merged into the row, MergeSpatialIntoRows); its tile is the
  // period's values repeated, filled once per row. The tile length is a multiple of it.
  int64_t period = 0;
};


// What one thread needs to walk part of the output: tile registers, where each operand's
// current tile is, and the odometer over the outer index with every input's offset.
struct Cursor {
  std::vector<float> regs;
  std::vector<const float*> ptrs;
  std::vector<int64_t> index, offsets;
  std::vector<int64_t> filled;  // per periodic operand: the offset its register holds, or -1
};

class ElementwiseKernel : public CpuKernel {
 public:
  // `out_dtype`: float32, or the integer type a final kQuantize instruction stores.
  ElementwiseKernel(std::vector<Operand> in, std::vector<Instr> prog, int out,
                    std::vector<int64_t> shape, int threads, DType out_dtype = DType::kFloat32)
      : in_(std::move(in)), prog_(std::move(prog)), out_(out), shape_(std::move(shape)),
        out_dtype_(out_dtype), out_size_(static_cast<int64_t>(DTypeSize(out_dtype))) {
    if (shape_.empty()) shape_ = {1};
    Coalesce();
    inner_ = shape_.back();
    cursors_.resize(static_cast<size_t>(std::max(1, threads)));
    for (const Operand& o : in_) row_loads_ = row_loads_ || (o.used && !o.dense);
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

  // The output is cut into units (a tile of packed short rows, or one tile of a long row);
  // each thread takes a contiguous range of units with its own cursor. Units never share
  // an output element, and each reads its inputs before writing, so in-place stays safe.
  absl::Status Run(const ExecContext& ctx) override {
    const int64_t total = NumElements(shape_);
    if (total == 0) return absl::OkStatus();
    char* y = static_cast<char*>(ctx.ptrs[out_]);
    const int64_t rows = total / inner_;
    if (inner_ <= tile_ / 4) {
      // Short rows (attention scores, [.., 16]): a tile spans whole rows, so the program
      // is dispatched once per tile, not once per row.
      const int64_t per = tile_ / inner_;
      ForEachChunk((rows + per - 1) / per, total >= kParallelElements,
                   static_cast<int>(cursors_.size()), [&](int t, int64_t u0, int64_t u1) {
                     Cursor& c = cursors_[t];
                     Seek(c, u0 * per);
                     for (int64_t u = u0; u < u1; ++u) {
                       const int64_t r0 = u * per, k = std::min(per, rows - r0);
                       LoadRows(ctx, c, r0, k);
                       Compute(c, y + r0 * inner_ * out_size_, k * inner_);
                     }
                   });
      return absl::OkStatus();
    }
    const int64_t tiles = (inner_ + tile_ - 1) / tile_;  // per row
    ForEachChunk(rows * tiles, total >= kParallelElements, static_cast<int>(cursors_.size()),
                 [&](int t, int64_t u0, int64_t u1) {
                   Cursor& c = cursors_[t];
                   int64_t row = u0 / tiles, tile = u0 % tiles;  // no division per tile
                   Seek(c, row);
                   std::fill(c.filled.begin(), c.filled.end(), -1);  // inputs change per run
                   for (int64_t u = u0; u < u1; ++u) {
                     const int64_t t0 = tile * tile_, n = std::min(tile_, inner_ - t0);
                     LoadInputs(ctx, c, t0, n);
                     Compute(c, y + (row * inner_ + t0) * out_size_, n);
                     if (++tile == tiles && u + 1 < u1) {
                       tile = 0;
                       ++row;
                       Advance(c);
                     }
                   }
                 });
    return absl::OkStatus();
  }

 private:
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
    for (int64_t d = static_cast<int64_t>(shape_.size()) - 2; d >= 0; --d) {
      bool joint = true;
      for (const Operand& o : in_) joint = joint && o.strides[d] == o.strides[d + 1] * shape_[d + 1];
      if (!joint) continue;
      shape_[d] *= shape_[d + 1];
      shape_.erase(shape_.begin() + d + 1);
      for (Operand& o : in_) {
        o.strides[d] = o.strides[d + 1];
        o.strides.erase(o.strides.begin() + d + 1);
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
      const float* base = static_cast<const float*>(ctx.ptrs[in_[k].slot]);
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

  // Runs the program over `n` loaded elements; the last result goes to `y` (through its
  // register and a conversion when the output is an integer type).
  void Compute(Cursor& c, void* y, int64_t n) {
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
    std::fill(c.offsets.begin(), c.offsets.end(), 0);
    for (int64_t d = static_cast<int64_t>(shape_.size()) - 2; d >= 0; --d) {
      c.index[d] = row % shape_[d];
      row /= shape_[d];
      for (size_t k = 0; k < in_.size(); ++k) c.offsets[k] += c.index[d] * in_[k].strides[d];
    }
  }

  // Steps the outer index and each input's offset by one row.
  void Advance(Cursor& c) {
    for (int64_t d = static_cast<int64_t>(shape_.size()) - 2; d >= 0; --d) {
      ++c.index[d];
      for (size_t k = 0; k < in_.size(); ++k) c.offsets[k] += in_[k].strides[d];
      if (c.index[d] < shape_[d]) return;
      for (size_t k = 0; k < in_.size(); ++k) c.offsets[k] -= in_[k].strides[d] * shape_[d];
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
};

// A one-element constant input of `node` (a Q/DQ instruction's scale or zero point).
const Tensor* ScalarConstant(const Node& node, int64_t k) {
  if (k < 0 || k >= static_cast<int64_t>(node.inputs.size())) return nullptr;
  const Value* v = node.inputs[k];
  if (!v || !v->is_constant() || v->constant->numel() != 1 || v->constant->rank() > 1) {
    return nullptr;
  }
  return &*v->constant;
}

// A program's per-tensor DequantizeLinear or QuantizeLinear with constant float32 scale and
// (optional) 8/16-bit zero point, as an instruction reading operand 0 only; `qtype` is the
// type of the Q's output (the program's) and of the DQ's zero point. nullopt otherwise (the
// reference kernel then runs the program). The DQ's operand is checked by the caller.
std::optional<Instr> QuantInstr(const Node& node, const kiln_ops::Instruction& in, bool last,
                                DType program_dtype) {
  const bool quantize = in.op == "QuantizeLinear";
  if (in.operands.size() < 2 || in.operands.size() > 3 || (quantize && !last)) return std::nullopt;
  const Tensor* scale = ScalarConstant(node, in.operands[1]);
  const Tensor* zero = in.operands.size() > 2 ? ScalarConstant(node, in.operands[2]) : nullptr;
  if (!scale || scale->dtype() != DType::kFloat32 || (in.operands.size() > 2 && !zero)) {
    return std::nullopt;
  }
  auto attr = [&](const char* k) {
    auto it = in.attrs.find(k);
    return it == in.attrs.end() ? int64_t{0} : it->second.i;
  };
  const int64_t out_attr = attr("output_dtype");
  Instr i{quantize ? Op::kQuantize : Op::kDequantize, {static_cast<int>(in.operands[0])},
          scale->data<float>()[0], zero ? static_cast<float>(zero->GetDouble(0)) : 0.f};
  if (quantize) {
    const DType qt = zero ? zero->dtype() : out_attr != 0 ? static_cast<DType>(out_attr) : DType::kUInt8;
    if (qt != program_dtype || (out_attr != 0 && out_attr != static_cast<int64_t>(qt)) ||
        !qmath::Range(qt, &i.lo, &i.hi)) {
      return std::nullopt;
    }
    const int64_t prec = attr("precision");
    if (prec != 0 && prec != static_cast<int64_t>(DType::kFloat32)) return std::nullopt;
  } else {
    // The data's type (when it is an input; the caller refuses anything else) is the zero
    // point's, as the reference requires.
    const int64_t x = in.operands[0];
    const Value* xv = x < static_cast<int64_t>(node.inputs.size()) ? node.inputs[x] : nullptr;
    float lo, hi;
    if ((zero && !qmath::Range(zero->dtype(), &lo, &hi)) || (zero && xv && xv->dtype != zero->dtype()) ||
        (out_attr != 0 && out_attr != static_cast<int64_t>(DType::kFloat32))) {
      return std::nullopt;
    }
  }
  return i;
}

// The instructions of a FusedElementwise node, or of a single element-wise node.
std::optional<std::vector<Instr>> ReadInstrs(const Node& node) {
  std::vector<Instr> prog;
  if (node.domain == kKilnDomain && node.op_type == kiln_ops::kFusedElementwise) {
    absl::StatusOr<kiln_ops::Program> p = kiln_ops::ReadProgram(node);
    if (!p.ok() || p->instructions.empty()) return std::nullopt;
    // A float program, or one whose last instruction quantizes it.
    if (p->dtype != DType::kFloat32 && p->instructions.back().op != "QuantizeLinear") {
      return std::nullopt;
    }
    for (size_t j = 0; j < p->instructions.size(); ++j) {
      const kiln_ops::Instruction& in = p->instructions[j];
      if (in.op == "QuantizeLinear" || in.op == "DequantizeLinear") {
        std::optional<Instr> q = QuantInstr(node, in, j + 1 == p->instructions.size(), p->dtype);
        if (!q) return std::nullopt;
        prog.push_back(std::move(*q));
        continue;
      }
      if (in.op == "Cast") {  // to float only; the operand is converted when loaded
        auto to = in.attrs.find("to");
        if (to == in.attrs.end() || to->second.i != 1 || in.operands.size() != 1) return std::nullopt;
        prog.push_back(Instr{Op::kCast, {static_cast<int>(in.operands[0])}, 0.f, 0.f});
        continue;
      }
      auto f = [&](const char* k, float dflt) {
        auto it = in.attrs.find(k);
        return it == in.attrs.end() ? dflt : it->second.f;
      };
      auto str = [&](const char* k, const char* dflt) {
        auto it = in.attrs.find(k);
        return it == in.attrs.end() ? std::string(dflt) : it->second.s;
      };
      std::optional<Instr> i = ew::MakeInstr(in.op, in.operands.size(), f, str);
      if (!i) return std::nullopt;
      for (int64_t k : in.operands) i->args.push_back(static_cast<int>(k));
      prog.push_back(std::move(*i));
    }
    return prog;
  }
  if (!node.domain.empty() || node.outputs.size() != 1) return std::nullopt;
  if (node.op_type == "Clip" && node.opset < 11) return std::nullopt;  // bounds were attributes
  std::optional<Instr> i = ew::MakeInstr(
      node.op_type, node.inputs.size(), [&](const char* k, float d) { return node.GetFloat(k, d); },
      [&](const char* k, const char* d) { return node.GetString(k, d); });
  if (!i) return std::nullopt;
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    if (!node.inputs[k]) return std::nullopt;  // an omitted Clip bound
    i->args.push_back(static_cast<int>(k));
  }
  prog.push_back(std::move(*i));
  return prog;
}

// Whether every instruction reading operand k is a Cast (to float) or a DequantizeLinear,
// and whether any reads it.
bool OnlyConvertingReads(const std::vector<Instr>& prog, int k) {
  for (const Instr& i : prog) {
    for (int a : i.args) {
      if (a == k && i.op != Op::kCast && i.op != Op::kDequantize) return false;
    }
  }
  return true;
}

bool Reads(const std::vector<Instr>& prog, int k) {
  for (const Instr& i : prog) {
    for (int a : i.args) {
      if (a == k) return true;
    }
  }
  return false;
}

}  // namespace

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

namespace {

// An operand's shape padded to `rank` when it is [N or 1, C or 1, 1, ...] against `y`: a
// per-channel (or per-image, or scalar) operand; nullopt otherwise.
std::optional<std::vector<int64_t>> PerChannel(std::vector<int64_t> s, const std::vector<int64_t>& y) {
  if (s.size() > y.size()) return std::nullopt;
  s.insert(s.begin(), y.size() - s.size(), 1);
  if ((s[0] != 1 && s[0] != y[0]) || (s[1] != 1 && s[1] != y[1])) return std::nullopt;
  for (size_t d = 2; d < s.size(); ++d) {
    if (s[d] != 1) return std::nullopt;
  }
  return s;
}

bool FloatValue(const Value* v) { return v && v->dtype == DType::kFloat32 && v->shape && IsStatic(*v->shape); }

// The iteration space in memory order: [N, spatial..., C] channels-last, [N, C/b, spatial...,
// b] blocked; and the element strides there of a per-channel operand of shape `s`.
std::vector<int64_t> MemoryOrderDims(const std::vector<int64_t>& y, ChannelLayout l, int b) {
  std::vector<int64_t> d = {y[0]};
  if (l == ChannelLayout::kBlocked) d.push_back(y[1] / b);
  d.insert(d.end(), y.begin() + 2, y.end());
  d.push_back(l == ChannelLayout::kBlocked ? b : y[1]);
  return d;
}

std::vector<int64_t> PerChannelStrides(const std::vector<int64_t>& s, const std::vector<int64_t>& y,
                                       ChannelLayout l, int b) {
  const int64_t c_stride = s[1] == 1 ? 0 : 1;
  const int64_t n_stride = s[0] == 1 ? 0 : s[1];
  std::vector<int64_t> st = {n_stride};
  if (l == ChannelLayout::kBlocked) st.push_back(b * c_stride);
  st.insert(st.end(), y.size() - 2, 0);
  st.push_back(c_stride);
  return st;
}

std::vector<int64_t> DenseStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> st(dims.size(), 1);
  for (int64_t d = static_cast<int64_t>(dims.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * dims[d + 1];
  return st;
}

// The per-channel operands of a layout program are constant over the spatial dims, so those
// dims and the innermost (the channels, or a block of them) merge into one row that each
// per-channel operand repeats with the innermost size as its period: rows of a 16-channel
// block (or of a few channels, channels-last) otherwise cost a dispatch and an odometer step
// each. Returns the iteration dims and rewrites the operands' strides; unchanged when a row
// would stay shorter than a tile.
std::vector<int64_t> MergeSpatialIntoRows(const std::vector<int64_t>& dims, ChannelLayout layout,
                                          std::vector<Operand>& in) {
  const size_t first = layout == ChannelLayout::kBlocked ? 2 : 1;  // of the spatial dims
  const int64_t inner = dims.back();
  int64_t spatial = 1;
  for (size_t d = first; d + 1 < dims.size(); ++d) spatial *= dims[d];
  if (spatial == 1 || spatial * inner < kTile) return dims;
  std::vector<int64_t> merged(dims.begin(), dims.begin() + first);
  merged.push_back(spatial * inner);
  for (Operand& o : in) {
    if (o.dense) {
      o.strides = DenseStrides(merged);
      continue;
    }
    std::vector<int64_t> st(o.strides.begin(), o.strides.begin() + first);
    st.push_back(o.strides.back());
    o.strides = std::move(st);
    o.period = inner;
  }
  return merged;
}

// The element-wise work in the layout a convolution left its activation in (channels-last
// or whole channel blocks): DenseNet's pre-activation BatchNorm+ReLU and the like no longer
// reorder to plain and back. Every operand is either the activation's shape (read in that
// layout) or per-channel/scalar; the output is written in the layout too. nullptr otherwise.
std::unique_ptr<CpuKernel> MakeLayoutElementwise(BuildContext& ctx, const Node& node,
                                                 const std::vector<Instr>& prog, int out) {
  const std::vector<int64_t> y = ctx.slots[out].shape;
  if (!ctx.slots[out].blocked_ok || y.size() < 3 || y.size() > 5) return nullptr;
  int block = 0;
  ChannelLayout layout = ChannelLayout::kOther;
  for (const Value* v : node.inputs) {
    const int s = ctx.SlotOf(v);
    if (s < 0 || !v || ctx.slots[s].dtype != DType::kFloat32) return nullptr;
    if (layout == ChannelLayout::kOther && ctx.slots[s].shape == y) {
      layout = StoredChannelLayout(ctx, s, &block);
    }
  }
  if (layout == ChannelLayout::kOther) return nullptr;
  const std::vector<int64_t> dims = MemoryOrderDims(y, layout, block);
  std::vector<Operand> in;
  for (const Value* v : node.inputs) {
    const int s = ctx.SlotOf(v);
    const std::vector<int64_t> shape = ctx.slots[s].shape;
    if (shape == y) {
      in.push_back({ctx.ReadAs(s, ChannelLayoutDesc(y, layout, block)), DenseStrides(dims), true});
      continue;
    }
    std::optional<std::vector<int64_t>> pc = PerChannel(shape, y);
    if (!pc) return nullptr;
    const int plain = ctx.slots[s].is_plain() ? s : ctx.ReadAs(s, ctx.PlainMd(s));
    in.push_back({plain, PerChannelStrides(*pc, y, layout, block), false});
  }
  const int y_slot = ctx.WriteAs(out, ChannelLayoutDesc(y, layout, block));
  std::vector<int64_t> iter = MergeSpatialIntoRows(dims, layout, in);
  return std::make_unique<ElementwiseKernel>(std::move(in), prog, y_slot, std::move(iter),
                                             omp_get_max_threads());
}

// A QDQ program over 8-bit activations that int8 convolutions left channels-last: every
// input it reads is the output's shape and every other one a scalar, so with all of them
// stored in one unpadded layout the work is the same on the flat buffers. Reading them in
// that layout (and writing the output so) spares a reorder to plain and back around every
// quantized Add of a residual network.
bool QuantizedProgram(const std::vector<Instr>& prog) {
  for (const Instr& i : prog) {
    if (i.op == Op::kQuantize || i.op == Op::kDequantize) return true;
  }
  return false;
}

// The strides of an unblocked, unpadded desc; nullopt otherwise.
std::optional<dnnl::memory::dims> UnpaddedStrides(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked || d.format_desc.blocking.inner_nblks != 0 || d.offset0 != 0) {
    return std::nullopt;
  }
  for (int i = 0; i < d.ndims; ++i) {
    if (d.padded_dims[i] != d.dims[i]) return std::nullopt;
  }
  return dnnl::memory::dims(d.format_desc.blocking.strides, d.format_desc.blocking.strides + d.ndims);
}

// The layout (strides) of the first full-shape input stored unplain; nullopt when none is.
std::optional<dnnl::memory::dims> SharedLayout(const BuildContext& ctx, const Node& node,
                                               const std::vector<int64_t>& y) {
  for (const Value* v : node.inputs) {
    const int s = ctx.SlotOf(v);
    if (s >= 0 && ctx.slots[s].shape == y && !ctx.slots[s].is_plain()) {
      return UnpaddedStrides(ctx.slots[s].md);
    }
  }
  return std::nullopt;
}

std::unique_ptr<CpuKernel> MakeSameLayoutQuantized(BuildContext& ctx, const Node& node,
                                                   const std::vector<Instr>& prog, int out,
                                                   DType out_dtype) {
  const std::vector<int64_t> y = ctx.slots[out].shape;
  if (!QuantizedProgram(prog) || !ctx.slots[out].blocked_ok || y.size() < 3 || y.size() > 5) {
    return nullptr;
  }
  std::optional<dnnl::memory::dims> strides = SharedLayout(ctx, node, y);
  if (!strides) return nullptr;
  const int64_t n = NumElements(y);
  auto md_of = [&](int slot) {
    return dnnl::memory::desc(ToDims(y), ctx.PlainMd(slot).data_type(), *strides);
  };
  std::vector<Operand> in;
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const int s = ctx.SlotOf(node.inputs[k]);
    if (s < 0) return nullptr;
    const bool full = ctx.slots[s].shape == y, used = Reads(prog, static_cast<int>(k));
    if (!used || (!full && NumElements(ctx.slots[s].shape) == 1)) {
      Operand o{s, {0}, false, nullptr};
      o.used = used;
      if (used && ctx.slots[s].dtype != DType::kFloat32) return nullptr;
      in.push_back(std::move(o));
      continue;
    }
    const DType dt = ctx.slots[s].dtype;
    const CastFn to_float = dt == DType::kFloat32 ? nullptr : CastFor(dt, DType::kFloat32);
    if (!full || (dt != DType::kFloat32 && (!to_float || !OnlyConvertingReads(prog, static_cast<int>(k))))) {
      return nullptr;
    }
    Operand o{ctx.ReadAs(s, md_of(s)), {1}, true, to_float};
    o.dtype = dt;
    in.push_back(std::move(o));
  }
  const int y_slot = ctx.WriteAs(out, md_of(out));
  return std::make_unique<ElementwiseKernel>(std::move(in), prog, y_slot, std::vector<int64_t>{n},
                                             omp_get_max_threads(), out_dtype);
}

// Whether input i of a QDQ program may be read in a convolution's unpadded layout (see
// MakeSameLayoutQuantized): it is the output's shape, 8-bit or float32, and every other
// input the program reads is that shape too or a scalar.
bool QuantizedLayoutInput(const Node& node, const std::vector<Instr>& prog, size_t i) {
  const Value* out = node.output(0);
  if (!QuantizedProgram(prog) || !out || !out->shape || !IsStatic(*out->shape)) return false;
  const std::vector<int64_t> y = StaticDims(*out->shape);
  if (y.size() < 3 || y.size() > 5 || i >= node.inputs.size()) return false;
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const Value* v = node.inputs[k];
    if (!v || !v->shape || !IsStatic(*v->shape)) return false;
    const std::vector<int64_t> s = StaticDims(*v->shape);
    if (Reads(prog, static_cast<int>(k)) && s != y && NumElements(s) != 1) return false;
  }
  return StaticDims(*node.inputs[i]->shape) == y;
}

}  // namespace

bool LayoutElementwiseInput(const Node& node, size_t i) {
  std::optional<std::vector<Instr>> prog = ReadInstrs(node);
  if (prog && QuantizedLayoutInput(node, *prog, i)) return true;
  if (!prog || !node.output(0) || !FloatValue(node.output(0))) return false;
  const std::vector<int64_t> y = StaticDims(*node.output(0)->shape);
  if (y.size() < 3 || y.size() > 5 || i >= node.inputs.size()) return false;
  for (const Value* v : node.inputs) {
    if (!FloatValue(v)) return false;
    const std::vector<int64_t> s = StaticDims(*v->shape);
    if (s != y && !PerChannel(s, y)) return false;
  }
  return StaticDims(*node.inputs[i]->shape) == y;
}

std::unique_ptr<CpuKernel> MakeElementwiseKernel(BuildContext& ctx, const Node& node) {
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
    if (!Reads(*prog, static_cast<int>(k))) {  // a scale or zero point the instruction holds
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
  return std::make_unique<ElementwiseKernel>(std::move(in), std::move(*prog), out, shape,
                                             omp_get_max_threads(), out_dtype);
}

}  // namespace kiln::cpu
