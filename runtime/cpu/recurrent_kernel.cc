// RNN, GRU and LSTM on float32 with constant W, R and B (every direction, layout, activation
// with alpha/beta, clip, sequence_lens, initial states, GRU's linear_before_reset, LSTM's
// peepholes and input_forget), the reference's formulas (ops/ops_rnn.cc) in
// float. W and R are stored transposed at build so each gate update is a run of axpys over
// contiguous gate rows (vectorizable without reassociating sums); the input projection of
// a whole sequence is done before its recurrence. Scratch is owned by the kernel: Run
// allocates nothing.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "base/aligned.h"
#include "ops/rnn_activations.h"
#include "runtime/cpu/axpy_rows.h"
#include "runtime/cpu/elementwise_ops.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/own_kernels.h"

namespace kiln::cpu {
namespace {

enum class Cell { kRnn, kGru, kLstm };

struct Act {
  enum Kind { kSigmoid, kTanh, kRelu, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh,
              kHardSigmoid, kElu, kSoftsign, kSoftplus } kind = kTanh;
  float alpha = 0, beta = 0;
  float operator()(float x) const {
    switch (kind) {
      case kSigmoid: return 1.f / (1.f + std::exp(-x));
      case kTanh: return std::tanh(x);
      case kRelu: return std::max(0.f, x);
      case kAffine: return alpha * x + beta;
      case kLeakyRelu: return x >= 0 ? x : alpha * x;
      case kThresholdedRelu: return x > alpha ? x : 0.f;
      case kScaledTanh: return alpha * std::tanh(beta * x);
      case kHardSigmoid: return std::clamp(alpha * x + beta, 0.f, 1.f);
      case kElu: return x >= 0 ? x : alpha * (std::exp(x) - 1);
      case kSoftsign: return x / (1 + std::fabs(x));
      case kSoftplus: return std::log1p(std::exp(x));
    }
    return x;
  }
  // x[i] = act(x[i]) over n values. The common gates (sigmoid, tanh) run on the element-wise
  // kernels' per-ISA loops (vectorized exp/tanh) instead of a libm call per value.
  void Apply(float* x, int64_t n) const {
    static const ew::Instr kSigmoidInstr{ew::Op::kSigmoid, {}, 0.f, 0.f};
    static const ew::Instr kTanhInstr{ew::Op::kTanh, {}, 0.f, 0.f};
    switch (kind) {
      case kSigmoid: return ew::Unary(kSigmoidInstr, x, x, n);
      case kTanh: return ew::Unary(kTanhInstr, x, x, n);
      default:
        for (int64_t i = 0; i < n; ++i) x[i] = (*this)(x[i]);
    }
  }
};

// The activation named `name` with ONNX's default alpha/beta; false for an unknown name.
bool MakeAct(const std::string& name, Act& a) {
  struct D { const char* n; Act::Kind k; float alpha, beta; };
  static const D kAll[] = {{"Sigmoid", Act::kSigmoid, 0, 0}, {"Tanh", Act::kTanh, 0, 0},
                           {"Relu", Act::kRelu, 0, 0}, {"Affine", Act::kAffine, 1, 0},
                           {"LeakyRelu", Act::kLeakyRelu, 0.01f, 0},
                           {"ThresholdedRelu", Act::kThresholdedRelu, 1, 0},
                           {"ScaledTanh", Act::kScaledTanh, 1, 1},
                           {"HardSigmoid", Act::kHardSigmoid, 0.2f, 0.5f},
                           {"Elu", Act::kElu, 1, 0}, {"Softsign", Act::kSoftsign, 0, 0},
                           {"Softplus", Act::kSoftplus, 0, 0}};
  for (const D& d : kAll) {
    if (name == d.n) {
      a = Act{d.k, d.alpha, d.beta};
      return true;
    }
  }
  return false;
}

struct RnnShape {
  Cell cell = Cell::kLstm;
  int64_t gates = 4, dirs = 1, hidden = 0, input = 0, steps = 0, batch = 0;
  bool batch_first = false, reverse_only = false, lbr = false, input_forget = false;
  float clip = 0;  // 0: none
  std::vector<Act> acts;  // per direction: 1 (RNN), 2 (GRU) or 3 (LSTM)
};

struct RnnSlots {
  int x = -1, lens = -1, h0 = -1, c0 = -1, y = -1, yh = -1, yc = -1;
};

class RecurrentKernel : public CpuKernel {
 public:
  bool follows_team() const override { return true; }
  RecurrentKernel(RnnShape s, RnnSlots io, std::vector<float> wt, std::vector<float> rt,
                  std::vector<float> b, std::vector<float> p)
      : s_(std::move(s)), io_(io), rt_(std::move(rt)), b_(std::move(b)), p_(std::move(p)) {
    const int64_t gh = s_.gates * s_.hidden;
    scratch_.resize(s_.dirs * s_.batch);
    for (Scratch& w : scratch_) {
      w.gates.resize(gh);
      w.h.resize(s_.hidden);
      w.c.resize(s_.hidden);
      w.tmp.resize(s_.hidden);
    }
    // Without sequence_lens every sequence of a direction steps in lockstep: up to
    // kMaxAxpyRows of them share each read of R (a group); with it, one sequence per group.
    group_ = io_.lens >= 0 ? 1 : kMaxAxpyRows;
    groups_ = (s_.batch + group_ - 1) / group_;
    // Groups and directions are independent: split across threads when the work outweighs
    // waking them.
    parallel_ =
        s_.dirs * groups_ > 1 &&
        s_.steps * gh * (s_.input + s_.hidden) * s_.dirs * s_.batch >= kParallelElements * 8;
    PrepareProjection(wt);  // packed for the GEMM: the plain copy is not kept
  }

  absl::Status Run(const ExecContext& ctx) override {
    float* y = io_.y >= 0 ? static_cast<float*>(ctx.ptrs[io_.y]) : nullptr;
    if (y) std::fill(y, y + s_.steps * s_.dirs * s_.batch * s_.hidden, 0.f);
    if (io_.lens >= 0) {  // checked up front: the tasks below cannot return errors
      const int32_t* lens = static_cast<const int32_t*>(ctx.ptrs[io_.lens]);
      for (int64_t b = 0; b < s_.batch; ++b) {
        if (lens[b] < 0 || lens[b] > s_.steps) {
          return absl::InvalidArgumentError("sequence_lens[" + std::to_string(b) + "] = " +
                                            std::to_string(lens[b]) + " is outside [0, " +
                                            std::to_string(s_.steps) + "]");
        }
      }
    }
    Project(static_cast<const float*>(ctx.ptrs[io_.x]));
    ForEachIndex(s_.dirs * groups_, parallel_, [&](int64_t task) {
      const int64_t d = task / groups_, b0 = task % groups_ * group_;
      RunGroup(ctx, d, b0, static_cast<int>(std::min<int64_t>(group_, s_.batch - b0)), y);
    });
    return absl::OkStatus();
  }

 private:
  // Element index of (t, d, b, k) in Y, and of (d, b, k) in Y_h / Y_c, in the node's layout.
  int64_t YAt(int64_t t, int64_t d, int64_t b) const {
    return s_.batch_first ? ((b * s_.steps + t) * s_.dirs + d) * s_.hidden
                          : ((t * s_.dirs + d) * s_.batch + b) * s_.hidden;
  }
  int64_t StateAt(int64_t d, int64_t b) const {
    return s_.batch_first ? (b * s_.dirs + d) * s_.hidden : (d * s_.batch + b) * s_.hidden;
  }
  // Row of (t, b) in X viewed as a [steps * batch, input] matrix, and in its projection.
  int64_t XRow(int64_t t, int64_t b) const {
    return s_.batch_first ? b * s_.steps + t : t * s_.batch + b;
  }
  // Gate values are clipped, then activated a whole gate at a time (Act::Apply).
  void Gate(const Act& act, float* x, int64_t n) const {
    if (s_.clip > 0) {
      for (int64_t i = 0; i < n; ++i) x[i] = std::clamp(x[i], -s_.clip, s_.clip);
    }
    act.Apply(x, n);
  }
  // out[r][0, n) += in[r] * R^T's columns [first, first + n) for direction d, for the
  // `rows` sequences of a group (R^T read once for all of them).
  void Recur(int64_t d, const float* const* in, float* const* out, int rows, int64_t first,
             int64_t n) const {
    const int64_t gh = s_.gates * s_.hidden;
    AxpyRowsMulti(in, rows, s_.hidden, rt_.data() + d * s_.hidden * gh + first, gh, out, n);
  }

  // One sequence's buffers: gates, state and a temp.
  struct Scratch {
    std::vector<float> gates, h, c, tmp;
  };
  // One group's pointers into its sequences' scratch.
  struct Rows {
    int n = 0;
    int64_t b[kMaxAxpyRows];
    float *g[kMaxAxpyRows], *h[kMaxAxpyRows], *c[kMaxAxpyRows], *tmp[kMaxAxpyRows];
  };
  void RunGroup(const ExecContext& ctx, int64_t d, int64_t b0, int rows, float* y);
  void PrepareProjection(const std::vector<float>& wt);
  void Project(const float* x);
  void Step(int64_t d, int64_t t, const Rows& rows) const;
  void GruStep(int64_t d, const Act* a, const Rows& rows) const;
  void LstmGates(const Act* a, float* g, float* h, float* c, float* tmp, int64_t d) const;

  RnnShape s_;
  RnnSlots io_;
  std::vector<float> rt_, b_, p_;         // R^T per direction, B (Wb then Rb), P
  std::vector<Scratch> scratch_;          // one per (direction, batch entry)
  int64_t group_ = 1, groups_ = 1;        // sequences per group, groups per direction
  bool parallel_ = false;
  // The input projection X W^T of every step and sequence, one GEMM per direction per run
  // (W^T packed at build), and the biases the steps add to it.
  gemm::Blocking bl_;
  int threads_ = 1;
  std::vector<AlignedPtr<float>> packed_w_;
  AlignedPtr<float> a_pack_;
  std::vector<float> xw_;    // per direction: [steps * batch, gates * hidden], X's row order
  std::vector<float> bias_;  // per direction: Wb + Rb (GRU's candidate: Wb only)
};

// `wt`: W^T per direction.
void RecurrentKernel::PrepareProjection(const std::vector<float>& wt) {
  const int64_t gh = s_.gates * s_.hidden;
  bl_ = gemm::BlockingFor(ActiveIsa());
  threads_ = std::max(1, omp_get_max_threads());
  for (int64_t d = 0; d < s_.dirs; ++d) {
    const int64_t floats = gemm::PackedBFloats(bl_, s_.input, gh);
    packed_w_.push_back(NewAlignedBuffer<float>(floats * sizeof(float)));
    gemm::PackB(bl_, {wt.data() + d * s_.input * gh, gh, 1}, s_.input, gh, 1.f,
                packed_w_.back().get());
    const float* wb = b_.data() + d * 2 * gh;
    for (int64_t j = 0; j < gh; ++j) {
      // GRU's candidate keeps Rbh apart (it is scaled by r with linear_before_reset).
      const bool apart = s_.cell == Cell::kGru && j >= 2 * s_.hidden;
      bias_.push_back(wb[j] + (apart ? 0.f : wb[gh + j]));
    }
  }
  a_pack_ = NewAlignedBuffer<float>(threads_ * gemm::APackFloats(bl_) * sizeof(float));
  xw_.resize(s_.dirs * s_.steps * s_.batch * gh);
}

// xw_ = X W^T for every direction: the whole input's projection in one product each.
void RecurrentKernel::Project(const float* x) {
  const int64_t gh = s_.gates * s_.hidden, rows = s_.steps * s_.batch;
  for (int64_t d = 0; d < s_.dirs; ++d) {
    gemm::Problem p;
    p.a = {x, s_.input, 1};
    p.b_packed = packed_w_[d].get();
    p.c = xw_.data() + d * rows * gh;
    p.ldc = gh;
    gemm::Run(bl_, &p, 1, rows, gh, s_.input, rows * gh >= kParallelElements, threads_,
              a_pack_.get(), {});
  }
}

// Time step t of every sequence of a group: their gates from the input projection and the
// biases, the R products for all of them at once, then each one's gate arithmetic.
void RecurrentKernel::Step(int64_t d, int64_t t, const Rows& rows) const {
  const int64_t H = s_.hidden, gh = s_.gates * H;
  const size_t per_dir = s_.acts.size() / s_.dirs;
  const Act* a = s_.acts.data() + d * per_dir;
  const float* bias = bias_.data() + d * gh;
  for (int r = 0; r < rows.n; ++r) {
    const float* xw = xw_.data() + (d * s_.steps * s_.batch + XRow(t, rows.b[r])) * gh;
    for (int64_t j = 0; j < gh; ++j) rows.g[r][j] = xw[j] + bias[j];
  }
  if (s_.cell == Cell::kGru) return GruStep(d, a, rows);
  Recur(d, rows.h, rows.g, rows.n, 0, gh);
  for (int r = 0; r < rows.n; ++r) {
    if (s_.cell == Cell::kRnn) {
      Gate(a[0], rows.g[r], H);
      std::copy(rows.g[r], rows.g[r] + H, rows.h[r]);
    } else {
      LstmGates(a, rows.g[r], rows.h[r], rows.c[r], rows.tmp[r], d);
    }
  }
}

void RecurrentKernel::GruStep(int64_t d, const Act* a, const Rows& rows) const {
  const int64_t H = s_.hidden, gh = s_.gates * H;
  Recur(d, rows.h, rows.g, rows.n, 0, 2 * H);  // z and r
  const float* rbh = b_.data() + d * 2 * gh + gh + 2 * H;
  for (int r = 0; r < rows.n; ++r) {
    Gate(a[0], rows.g[r], 2 * H);
    std::copy(rbh, rbh + H, rows.tmp[r]);
    if (!s_.lbr) {  // r (.) h, into c (free in a GRU)
      for (int64_t j = 0; j < H; ++j) rows.c[r][j] = rows.g[r][H + j] * rows.h[r][j];
    }
  }
  // With linear_before_reset r scales (Rh h + Rbh), else Rh multiplies (r (.) h).
  Recur(d, s_.lbr ? rows.h : rows.c, rows.tmp, rows.n, 2 * H, H);
  for (int r = 0; r < rows.n; ++r) {
    float *g = rows.g[r], *h = rows.h[r], *tmp = rows.tmp[r];
    if (s_.lbr) {
      for (int64_t j = 0; j < H; ++j) tmp[j] *= g[H + j];
    }
    float* cand = g + 2 * H;
    for (int64_t j = 0; j < H; ++j) cand[j] += tmp[j];
    Gate(a[1], cand, H);
    for (int64_t j = 0; j < H; ++j) h[j] = (1 - g[j]) * cand[j] + g[j] * h[j];
  }
}

void RecurrentKernel::LstmGates(const Act* a, float* g, float* h, float* c, float* tmp,
                                int64_t d) const {
  const int64_t H = s_.hidden;
  float *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H;
  const float* p = p_.empty() ? nullptr : p_.data() + d * 3 * H;  // i, o, f
  if (p) {
    for (int64_t j = 0; j < H; ++j) {
      gi[j] += p[j] * c[j];
      gf[j] += p[2 * H + j] * c[j];
    }
  }
  Gate(a[0], gi, H);
  Gate(a[0], gf, H);
  if (s_.input_forget) {
    for (int64_t j = 0; j < H; ++j) gf[j] = 1 - gi[j];
  }
  Gate(a[1], gc, H);
  for (int64_t j = 0; j < H; ++j) c[j] = gf[j] * c[j] + gi[j] * gc[j];
  if (p) {
    for (int64_t j = 0; j < H; ++j) go[j] += p[H + j] * c[j];
  }
  Gate(a[0], go, H);
  std::copy(c, c + H, tmp);
  a[2].Apply(tmp, H);
  for (int64_t j = 0; j < H; ++j) h[j] = go[j] * tmp[j];
}

// Sequences b0 .. b0 + n of direction d, stepping together (one when sequence_lens is given,
// so every sequence of a group has the same length).
void RecurrentKernel::RunGroup(const ExecContext& ctx, int64_t d, int64_t b0, int n, float* y) {
  const int64_t len =
      io_.lens >= 0 ? static_cast<const int32_t*>(ctx.ptrs[io_.lens])[b0] : s_.steps;
  const int64_t H = s_.hidden;
  const bool reverse = s_.reverse_only || d == 1;
  auto load = [&](int slot, int64_t b, std::vector<float>& v) {
    if (slot >= 0) {
      const float* src = static_cast<const float*>(ctx.ptrs[slot]) + StateAt(d, b);
      std::copy(src, src + H, v.begin());
    } else {
      std::fill(v.begin(), v.end(), 0.f);
    }
  };
  Rows rows;
  rows.n = n;
  for (int r = 0; r < n; ++r) {
    Scratch& ws = scratch_[d * s_.batch + b0 + r];
    load(io_.h0, b0 + r, ws.h);
    load(io_.c0, b0 + r, ws.c);
    rows.b[r] = b0 + r;
    rows.g[r] = ws.gates.data();
    rows.h[r] = ws.h.data();
    rows.c[r] = ws.c.data();
    rows.tmp[r] = ws.tmp.data();
  }
  for (int64_t k = 0; k < len; ++k) {
    const int64_t t = reverse ? len - 1 - k : k;
    Step(d, t, rows);
    for (int r = 0; r < n && y; ++r) std::copy(rows.h[r], rows.h[r] + H, y + YAt(t, d, b0 + r));
  }
  for (int r = 0; r < n; ++r) {
    const int64_t st = StateAt(d, b0 + r);
    if (io_.yh >= 0)
      std::copy(rows.h[r], rows.h[r] + H, static_cast<float*>(ctx.ptrs[io_.yh]) + st);
    if (io_.yc >= 0)
      std::copy(rows.c[r], rows.c[r] + H, static_cast<float*>(ctx.ptrs[io_.yc]) + st);
  }
}

// Attributes as the reference reads them; false for what the kernel leaves to it.
bool ReadShape(const Node& node, RnnShape& s) {
  s.cell = node.op_type == "RNN" ? Cell::kRnn : node.op_type == "GRU" ? Cell::kGru : Cell::kLstm;
  s.gates = s.cell == Cell::kRnn ? 1 : s.cell == Cell::kGru ? 3 : 4;
  const std::string dir = node.GetString("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional") return false;
  s.dirs = dir == "bidirectional" ? 2 : 1;
  s.reverse_only = dir == "reverse";
  s.batch_first = node.GetInt("layout", 0) != 0;
  s.clip = node.HasAttr("clip") ? node.GetFloat("clip", 0.f) : 0.f;
  s.lbr = node.GetInt("linear_before_reset", 0) != 0;
  s.input_forget = node.GetInt("input_forget", 0) != 0;
  const size_t per_dir = s.cell == Cell::kRnn ? 1 : s.cell == Cell::kGru ? 2 : 3;
  const std::optional<std::vector<std::string>> names =
      ref::RnnActivationNames(node, per_dir, s.dirs);
  if (!names || s.clip < 0) return false;
  const std::vector<float> alphas = node.GetFloats("activation_alpha");
  const std::vector<float> betas = node.GetFloats("activation_beta");
  for (size_t i = 0; i < names->size(); ++i) {
    Act a;
    if (!MakeAct((*names)[i], a)) return false;
    if (i < alphas.size()) a.alpha = alphas[i];
    if (i < betas.size()) a.beta = betas[i];
    s.acts.push_back(a);
  }
  return true;
}

// A constant float32 input's values, or nullopt.
std::optional<std::vector<float>> ConstFloats(const Node& node, size_t i) {
  const Value* v = node.input(i);
  if (!v || !v->is_constant() || v->constant->dtype() != DType::kFloat32) return std::nullopt;
  const float* p = v->constant->data<float>();
  return std::vector<float>(p, p + v->constant->numel());
}

// (dirs, rows, cols) -> (dirs, cols, rows).
std::vector<float> TransposeEach(const std::vector<float>& m, int64_t dirs, int64_t rows,
                                 int64_t cols) {
  std::vector<float> t(m.size());
  for (int64_t d = 0; d < dirs; ++d) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        t[(d * cols + c) * rows + r] = m[(d * rows + r) * cols + c];
      }
    }
  }
  return t;
}

// The optional runtime input i as a slot (-1 when absent); false when it has the wrong
// dtype or shape for the kernel.
bool OptionalSlot(BuildContext& ctx, const Node& node, size_t i, DType dtype,
                  const std::vector<int64_t>& shape, int& slot) {
  slot = -1;
  const Value* v = node.input(i);
  if (!v) return true;
  slot = ctx.SlotOf(v);
  return slot >= 0 && ctx.slots[slot].is_plain() && ctx.slots[slot].dtype == dtype &&
         ctx.slots[slot].shape == shape;
}

}  // namespace

std::unique_ptr<CpuKernel> MakeRecurrentKernel(BuildContext& ctx, const Node& node) {
  if (!node.domain.empty() ||
      (node.op_type != "RNN" && node.op_type != "GRU" && node.op_type != "LSTM")) {
    return nullptr;
  }
  RnnShape s;
  RnnSlots io;
  if (!ReadShape(node, s) || node.inputs.size() < 3 || !node.input(0)) return nullptr;
  io.x = ctx.SlotOf(node.input(0));
  if (io.x < 0 || !ctx.slots[io.x].is_plain() || ctx.slots[io.x].dtype != DType::kFloat32 ||
      ctx.slots[io.x].shape.size() != 3) {
    return nullptr;
  }
  const std::vector<int64_t>& xs = ctx.slots[io.x].shape;
  s.steps = xs[s.batch_first ? 1 : 0];
  s.batch = xs[s.batch_first ? 0 : 1];
  s.input = xs[2];
  std::optional<std::vector<float>> w = ConstFloats(node, 1), r = ConstFloats(node, 2);
  s.hidden = node.GetInt("hidden_size", 0);
  if (s.hidden <= 0 && node.input(1) && node.input(1)->shape && node.input(1)->shape->size() == 3 &&
      (*node.input(1)->shape)[1].known()) {
    s.hidden = (*node.input(1)->shape)[1].value / s.gates;
  }
  const int64_t H = s.hidden, gh = s.gates * H;
  if (!w || !r || H <= 0 || static_cast<int64_t>(w->size()) != s.dirs * gh * s.input ||
      static_cast<int64_t>(r->size()) != s.dirs * gh * H || s.steps == 0 || s.batch == 0) {
    return nullptr;
  }
  std::vector<float> b(s.dirs * 2 * gh, 0.f), p;
  if (node.input(3)) {
    std::optional<std::vector<float>> bias = ConstFloats(node, 3);
    if (!bias || bias->size() != b.size()) return nullptr;
    b = std::move(*bias);
  }
  if (s.cell == Cell::kLstm && node.input(7)) {
    std::optional<std::vector<float>> peep = ConstFloats(node, 7);
    if (!peep || static_cast<int64_t>(peep->size()) != s.dirs * 3 * H) return nullptr;
    p = std::move(*peep);
  }
  const std::vector<int64_t> state = s.batch_first ? std::vector<int64_t>{s.batch, s.dirs, H}
                                                   : std::vector<int64_t>{s.dirs, s.batch, H};
  const std::vector<int64_t> ys = s.batch_first
                                      ? std::vector<int64_t>{s.batch, s.steps, s.dirs, H}
                                      : std::vector<int64_t>{s.steps, s.dirs, s.batch, H};
  if (!OptionalSlot(ctx, node, 4, DType::kInt32, {s.batch}, io.lens) ||
      !OptionalSlot(ctx, node, 5, DType::kFloat32, state, io.h0) ||
      (s.cell == Cell::kLstm && !OptionalSlot(ctx, node, 6, DType::kFloat32, state, io.c0))) {
    return nullptr;
  }
  const int outs[3] = {node.output(0) ? ctx.SlotOf(node.output(0)) : -1,
                       node.output(1) ? ctx.SlotOf(node.output(1)) : -1,
                       node.output(2) ? ctx.SlotOf(node.output(2)) : -1};
  for (int k = 0; k < 3; ++k) {
    if (outs[k] < 0) continue;
    if (!ctx.slots[outs[k]].is_plain() || ctx.slots[outs[k]].shape != (k == 0 ? ys : state)) {
      return nullptr;
    }
  }
  io.y = outs[0];
  io.yh = outs[1];
  io.yc = s.cell == Cell::kLstm ? outs[2] : -1;
  std::vector<float> wt = TransposeEach(*w, s.dirs, gh, s.input);
  std::vector<float> rt = TransposeEach(*r, s.dirs, gh, H);
  return std::make_unique<RecurrentKernel>(std::move(s), io, std::move(wt), std::move(rt),
                                           std::move(b), std::move(p));
}

}  // namespace kiln::cpu
