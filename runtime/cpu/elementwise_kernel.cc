// ai.kiln.FusedElementwise programs and single ai.onnx element-wise ops (float32), as one
// tiled loop: the output is walked in tiles along its innermost dim; each input tile is read
// in place (contiguous), splatted (broadcast) or gathered (strided); rows shorter than a
// quarter tile are packed several to a tile; the instructions run
// tile by tile over small register buffers, in loops simple enough to vectorize. Reading a
// tile completes before its output tile is written, so an in-place plan (out == in) is safe.
#include <cmath>
#include <cstring>

#include "compiler/ir/kiln_ops.h"
#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kTile = 256;

enum class Op { kAdd, kSub, kMul, kDiv, kNeg, kAbs, kExp, kLog, kSqrt, kRecip, kRelu,
                kSigmoid, kTanh, kErf, kLeakyRelu, kClip, kHardSigmoid, kHardSwish };

struct Instr {
  Op op;
  std::vector<int> args;  // register numbers (inputs first, then instruction results)
  float alpha = 0.f, beta = 0.f;
};

std::optional<Op> ParseOp(const std::string& s, size_t arity) {
  static const std::map<std::string, std::pair<Op, size_t>> kOps = {
      {"Add", {Op::kAdd, 2}}, {"Sub", {Op::kSub, 2}}, {"Mul", {Op::kMul, 2}},
      {"Div", {Op::kDiv, 2}}, {"Neg", {Op::kNeg, 1}}, {"Abs", {Op::kAbs, 1}},
      {"Exp", {Op::kExp, 1}}, {"Log", {Op::kLog, 1}}, {"Sqrt", {Op::kSqrt, 1}},
      {"Reciprocal", {Op::kRecip, 1}}, {"Relu", {Op::kRelu, 1}},
      {"Sigmoid", {Op::kSigmoid, 1}}, {"Tanh", {Op::kTanh, 1}}, {"Erf", {Op::kErf, 1}},
      {"LeakyRelu", {Op::kLeakyRelu, 1}}, {"HardSigmoid", {Op::kHardSigmoid, 1}},
      {"HardSwish", {Op::kHardSwish, 1}}, {"Clip", {Op::kClip, 0}}};
  auto it = kOps.find(s);
  if (it == kOps.end()) return std::nullopt;
  if (it->second.first == Op::kClip) {
    if (arity < 1 || arity > 3) return std::nullopt;
  } else if (arity != it->second.second) {
    return std::nullopt;
  }
  return it->second.first;
}

float AttrF(const std::map<std::string, Attribute>& attrs, const char* k, float dflt) {
  auto it = attrs.find(k);
  return it == attrs.end() ? dflt : it->second.f;
}

KILN_VECTOR_CLONES void Unary(Op op, const float* a, float* y, int64_t n, float alpha,
                              float beta) {
  switch (op) {
    case Op::kNeg: for (int64_t i = 0; i < n; ++i) y[i] = -a[i]; break;
    case Op::kAbs: for (int64_t i = 0; i < n; ++i) y[i] = std::fabs(a[i]); break;
    case Op::kExp: for (int64_t i = 0; i < n; ++i) y[i] = std::exp(a[i]); break;
    case Op::kLog: for (int64_t i = 0; i < n; ++i) y[i] = std::log(a[i]); break;
    case Op::kSqrt: for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(a[i]); break;
    case Op::kRecip: for (int64_t i = 0; i < n; ++i) y[i] = 1.f / a[i]; break;
    case Op::kRelu: for (int64_t i = 0; i < n; ++i) y[i] = a[i] > 0.f ? a[i] : 0.f; break;
    case Op::kSigmoid: for (int64_t i = 0; i < n; ++i) y[i] = 1.f / (1.f + std::exp(-a[i])); break;
    case Op::kTanh: for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(a[i]); break;
    case Op::kErf: for (int64_t i = 0; i < n; ++i) y[i] = std::erf(a[i]); break;
    case Op::kLeakyRelu:
      for (int64_t i = 0; i < n; ++i) y[i] = a[i] >= 0.f ? a[i] : alpha * a[i];
      break;
    case Op::kHardSigmoid:
      for (int64_t i = 0; i < n; ++i) y[i] = std::fmin(1.f, std::fmax(0.f, alpha * a[i] + beta));
      break;
    case Op::kHardSwish:
      for (int64_t i = 0; i < n; ++i) {
        y[i] = a[i] * std::fmin(1.f, std::fmax(0.f, a[i] / 6.f + 0.5f));
      }
      break;
    default: std::memmove(y, a, n * sizeof(float)); break;
  }
}

KILN_VECTOR_CLONES void Binary(Op op, const float* a, const float* b, float* y, int64_t n) {
  switch (op) {
    case Op::kAdd: for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i]; break;
    case Op::kSub: for (int64_t i = 0; i < n; ++i) y[i] = a[i] - b[i]; break;
    case Op::kMul: for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i]; break;
    case Op::kDiv: for (int64_t i = 0; i < n; ++i) y[i] = a[i] / b[i]; break;
    default: for (int64_t i = 0; i < n; ++i) y[i] = a[i] / b[i]; break;
  }
}

// Clip with optional min (operand 1) and max (operand 2); NaN passes through.
void ClipTile(const float* x, const float* lo, const float* hi, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    if (lo && v < lo[i]) v = lo[i];
    if (hi && v > hi[i]) v = hi[i];
    y[i] = v;
  }
}

struct Operand {
  int slot;
  std::vector<int64_t> strides;  // element strides in the output's index space (0: broadcast)
  bool dense = false;            // laid out exactly like the output (same linear offsets)
};

class ElementwiseKernel : public CpuKernel {
 public:
  ElementwiseKernel(std::vector<Operand> in, std::vector<Instr> prog, int out,
                    std::vector<int64_t> shape)
      : in_(std::move(in)), prog_(std::move(prog)), out_(out), shape_(std::move(shape)) {
    if (shape_.empty()) shape_ = {1};
    inner_ = shape_.back();
    regs_.assign((in_.size() + prog_.size()) * kTile, 0.f);
    ptrs_.assign(in_.size() + prog_.size(), nullptr);
    index_.assign(shape_.size(), 0);
    offsets_.assign(in_.size(), 0);
  }

  absl::Status Run(const ExecContext& ctx) override {
    const int64_t total = NumElements(shape_);
    if (total == 0) return absl::OkStatus();
    float* y = static_cast<float*>(ctx.ptrs[out_]);
    std::fill(index_.begin(), index_.end(), 0);
    std::fill(offsets_.begin(), offsets_.end(), 0);
    const int64_t rows = total / inner_;
    if (inner_ <= kTile / 4) {
      // Short rows (attention scores, [.., 16]): a tile spans whole rows, so the program
      // is dispatched once per kTile elements, not once per row.
      const int64_t per = kTile / inner_;
      for (int64_t r0 = 0; r0 < rows; r0 += per) {
        const int64_t k = std::min(per, rows - r0);
        LoadRows(ctx, r0, k);
        Compute(y + r0 * inner_, k * inner_);
      }
      return absl::OkStatus();
    }
    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t t0 = 0; t0 < inner_; t0 += kTile) {
        const int64_t n = std::min(kTile, inner_ - t0);
        LoadInputs(ctx, t0, n);
        Compute(y + row * inner_ + t0, n);
      }
      Advance();
    }
    return absl::OkStatus();
  }

 private:
  float* Reg(size_t r) { return regs_.data() + r * kTile; }

  void LoadInputs(const ExecContext& ctx, int64_t t0, int64_t n) {
    for (size_t k = 0; k < in_.size(); ++k) {
      const float* base = static_cast<const float*>(ctx.ptrs[in_[k].slot]) + offsets_[k];
      const int64_t s = in_[k].strides.back();
      if (s == 1) {
        ptrs_[k] = base + t0;  // contiguous: read in place
        continue;
      }
      float* r = Reg(k);
      for (int64_t i = 0; i < n; ++i) r[i] = base[(t0 + i) * s];
      ptrs_[k] = r;
    }
  }

  // Rows [r0, r0 + count) of every input: in place when the input is laid out like the
  // output, else row by row into its register (advancing the row odometer).
  void LoadRows(const ExecContext& ctx, int64_t r0, int64_t count) {
    for (size_t k = 0; k < in_.size(); ++k) {
      const float* base = static_cast<const float*>(ctx.ptrs[in_[k].slot]);
      ptrs_[k] = in_[k].dense ? base + r0 * inner_ : Reg(k);
    }
    for (int64_t r = 0; r < count; ++r) {
      for (size_t k = 0; k < in_.size(); ++k) {
        if (in_[k].dense) continue;
        const float* src = static_cast<const float*>(ctx.ptrs[in_[k].slot]) + offsets_[k];
        const int64_t s = in_[k].strides.back();
        float* dst = Reg(k) + r * inner_;
        if (s == 1) {
          std::memcpy(dst, src, inner_ * sizeof(float));
        } else if (s == 0) {
          std::fill(dst, dst + inner_, *src);
        } else {
          for (int64_t i = 0; i < inner_; ++i) dst[i] = src[i * s];
        }
      }
      Advance();
    }
  }

  // Runs the program over `n` loaded elements; the last result goes to `y`.
  void Compute(float* y, int64_t n) {
    for (size_t i = 0; i < prog_.size(); ++i) {
      const Instr& ins = prog_[i];
      const size_t r = in_.size() + i;
      float* dst = i + 1 == prog_.size() ? y : Reg(r);
      const float* a = ptrs_[ins.args[0]];
      if (ins.op == Op::kClip) {
        ClipTile(a, ins.args.size() > 1 ? ptrs_[ins.args[1]] : nullptr,
                 ins.args.size() > 2 ? ptrs_[ins.args[2]] : nullptr, dst, n);
      } else if (ins.args.size() == 2) {
        Binary(ins.op, a, ptrs_[ins.args[1]], dst, n);
      } else {
        Unary(ins.op, a, dst, n, ins.alpha, ins.beta);
      }
      ptrs_[r] = dst;
    }
  }

  // Steps the outer index (all dims but the innermost) and each input's offset.
  void Advance() {
    for (int64_t d = static_cast<int64_t>(shape_.size()) - 2; d >= 0; --d) {
      ++index_[d];
      for (size_t k = 0; k < in_.size(); ++k) offsets_[k] += in_[k].strides[d];
      if (index_[d] < shape_[d]) return;
      for (size_t k = 0; k < in_.size(); ++k) offsets_[k] -= in_[k].strides[d] * shape_[d];
      index_[d] = 0;
    }
  }

  std::vector<Operand> in_;
  std::vector<Instr> prog_;
  int out_;
  std::vector<int64_t> shape_;
  int64_t inner_ = 1;
  std::vector<float> regs_;
  std::vector<const float*> ptrs_;
  std::vector<int64_t> index_, offsets_;
};

// Numpy broadcasting of `in` against `out`: strides with 0 on broadcast dims.
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

// The instructions of a FusedElementwise node, or of a single element-wise node.
std::optional<std::vector<Instr>> ReadInstrs(const Node& node) {
  std::vector<Instr> prog;
  if (node.domain == kKilnDomain && node.op_type == kiln_ops::kFusedElementwise) {
    absl::StatusOr<kiln_ops::Program> p = kiln_ops::ReadProgram(node);
    if (!p.ok() || p->dtype != DType::kFloat32) return std::nullopt;
    for (const auto& in : p->instructions) {
      std::optional<Op> op = ParseOp(in.op, in.operands.size());
      if (!op) return std::nullopt;
      Instr i{*op, {}, AttrF(in.attrs, "alpha", 0.01f), AttrF(in.attrs, "beta", 0.f)};
      if (*op == Op::kHardSigmoid) {
        i.alpha = AttrF(in.attrs, "alpha", 0.2f);
        i.beta = AttrF(in.attrs, "beta", 0.5f);
      }
      for (int64_t k : in.operands) i.args.push_back(static_cast<int>(k));
      prog.push_back(std::move(i));
    }
    return prog;
  }
  if (!node.domain.empty() || node.outputs.size() != 1) return std::nullopt;
  std::optional<Op> op = ParseOp(node.op_type, node.inputs.size());
  if (!op || (*op == Op::kClip && node.opset < 11)) return std::nullopt;
  Instr i{*op, {}, node.GetFloat("alpha", *op == Op::kHardSigmoid ? 0.2f : 0.01f),
          node.GetFloat("beta", 0.5f)};
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    if (!node.inputs[k]) return std::nullopt;  // an omitted Clip bound
    i.args.push_back(static_cast<int>(k));
  }
  prog.push_back(std::move(i));
  return prog;
}

}  // namespace

std::unique_ptr<CpuKernel> MakeElementwiseKernel(BuildContext& ctx, const Node& node) {
  std::optional<std::vector<Instr>> prog = ReadInstrs(node);
  const int out = ctx.SlotOf(node.output(0));
  if (!prog || prog->empty() || out < 0 || ctx.slots[out].dtype != DType::kFloat32) {
    return nullptr;
  }
  const std::vector<int64_t> shape = ctx.slots[out].shape;
  std::vector<Operand> in;
  for (const Value* v : node.inputs) {
    const int s = ctx.SlotOf(v);
    if (s < 0 || ctx.slots[s].dtype != DType::kFloat32) return nullptr;
    std::optional<std::vector<int64_t>> strides = BroadcastStrides(ctx.slots[s].shape, shape);
    if (!strides) return nullptr;
    in.push_back({s, *strides, NumElements(ctx.slots[s].shape) == NumElements(shape)});
  }
  for (const Instr& i : *prog) {
    for (int a : i.args) {
      if (a < 0 || a >= static_cast<int>(in.size() + (&i - prog->data()))) return nullptr;
    }
  }
  for (Operand& o : in) {
    if (!ctx.slots[o.slot].is_plain()) o.slot = ctx.ReadAs(o.slot, ctx.PlainMd(o.slot));
  }
  return std::make_unique<ElementwiseKernel>(std::move(in), std::move(*prog), out, shape);
}

}  // namespace kiln::cpu
