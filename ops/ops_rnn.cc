// RNN, GRU and LSTM (every opset form: forward, reverse and bidirectional; sequence_lens;
// initial states; both layouts; clip; the named activations with their alpha/beta; GRU's
// linear_before_reset; LSTM's peepholes and input_forget), one batch entry and one direction
// at a time, in double.
//
// Gate order in W, R and B: RNN i; GRU z, r, h; LSTM i, o, f, c (peepholes P: i, o, f).
// Steps at or past a batch entry's sequence length leave Y zero; Y_h / Y_c hold the state
// after its last valid step (the initial state for a length of 0).
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>

#include "ops/kernel_util.h"
#include "ops/nn_ops.h"
#include "ops/rnn_activations.h"

namespace kiln::ref::nn {
namespace {

enum class Cell { kRnn, kGru, kLstm };

struct Activation {
  std::string name;
  double alpha = 0, beta = 0;
  double operator()(double x) const;
};

double Activation::operator()(double x) const {
  if (name == "Sigmoid") return 1.0 / (1.0 + std::exp(-x));
  if (name == "Tanh") return std::tanh(x);
  if (name == "Relu") return std::max(0.0, x);
  if (name == "Affine") return alpha * x + beta;
  if (name == "LeakyRelu") return x >= 0 ? x : alpha * x;
  if (name == "ThresholdedRelu") return x > alpha ? x : 0.0;
  if (name == "ScaledTanh") return alpha * std::tanh(beta * x);
  if (name == "HardSigmoid") return std::clamp(alpha * x + beta, 0.0, 1.0);
  if (name == "Elu") return x >= 0 ? x : alpha * (std::exp(x) - 1);
  if (name == "Softsign") return x / (1 + std::fabs(x));
  return std::log1p(std::exp(x));  // Softplus (names are checked when read)
}

// Default alpha/beta of each activation, as its ONNX operator defines them.
bool ActivationDefaults(const std::string& name, double& alpha, double& beta) {
  static const std::map<std::string, std::pair<double, double>> kDefaults = {
      {"Sigmoid", {0, 0}},      {"Tanh", {0, 0}},
      {"Relu", {0, 0}},         {"Affine", {1, 0}},
      {"LeakyRelu", {0.01, 0}}, {"ThresholdedRelu", {1, 0}},
      {"ScaledTanh", {1, 1}},   {"HardSigmoid", {0.2, 0.5}},
      {"Elu", {1, 0}},          {"Softsign", {0, 0}},
      {"Softplus", {0, 0}}};
  auto it = kDefaults.find(name);
  if (it == kDefaults.end()) return false;
  alpha = it->second.first;
  beta = it->second.second;
  return true;
}

struct RnnSpec {
  Cell cell = Cell::kRnn;
  int64_t gates = 1, dirs = 1, hidden = 0, input = 0, steps = 0, batch = 0;
  bool batch_first = false, reverse_only = false, linear_before_reset = false;
  bool input_forget = false;
  double clip = 0;               // 0: no clipping
  std::vector<Activation> acts;  // per direction: 1 (RNN), 2 (GRU) or 3 (LSTM)
};

absl::Status ReadActivations(const Node& node, RnnSpec& s) {
  const size_t per_dir = s.cell == Cell::kRnn ? 1 : s.cell == Cell::kGru ? 2 : 3;
  const std::optional<std::vector<std::string>> listed = RnnActivationNames(node, per_dir, s.dirs);
  if (!listed) {
    return InvalidInput(node, "expected " + std::to_string(per_dir * s.dirs) + " activations");
  }
  const std::vector<std::string>& names = *listed;
  const std::vector<float> alphas = node.GetFloats("activation_alpha");
  const std::vector<float> betas = node.GetFloats("activation_beta");
  for (size_t i = 0; i < names.size(); ++i) {
    Activation a{names[i]};
    if (!ActivationDefaults(a.name, a.alpha, a.beta)) {
      return InvalidInput(node, "unknown activation '" + a.name + "'");
    }
    if (i < alphas.size()) a.alpha = alphas[i];
    if (i < betas.size()) a.beta = betas[i];
    s.acts.push_back(a);
  }
  return absl::OkStatus();
}

absl::StatusOr<RnnSpec> ReadSpec(const Node& node, const KernelInputs& in, Cell cell) {
  RnnSpec s;
  s.cell = cell;
  s.gates = cell == Cell::kRnn ? 1 : cell == Cell::kGru ? 3 : 4;
  const std::string dir = node.GetString("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional") {
    return InvalidInput(node, "unknown direction '" + dir + "'");
  }
  s.dirs = dir == "bidirectional" ? 2 : 1;
  s.reverse_only = dir == "reverse";
  s.hidden = node.GetInt("hidden_size", 0);
  s.batch_first = node.GetInt("layout", 0) != 0;
  s.clip = node.HasAttr("clip") ? node.GetFloat("clip", 0.0f) : 0.0;
  s.linear_before_reset = node.GetInt("linear_before_reset", 0) != 0;
  s.input_forget = node.GetInt("input_forget", 0) != 0;
  const Tensor& x = *in[0];
  if (x.rank() != 3) return InvalidInput(node, "X must be 3-D");
  s.steps = x.dim(s.batch_first ? 1 : 0);
  s.batch = x.dim(s.batch_first ? 0 : 1);
  s.input = x.dim(2);
  const Tensor& w = *in[1];
  const Tensor& r = *in[2];
  if (s.hidden <= 0 && w.rank() == 3) s.hidden = w.dim(1) / s.gates;
  if (s.hidden <= 0 || s.clip < 0 ||
      w.shape() != std::vector<int64_t>{s.dirs, s.gates * s.hidden, s.input} ||
      r.shape() != std::vector<int64_t>{s.dirs, s.gates * s.hidden, s.hidden}) {
    return InvalidInput(node, "W " + ShapeToString(w.shape()) + " or R " +
                                  ShapeToString(r.shape()) + " does not fit hidden_size " +
                                  std::to_string(s.hidden) + " and X");
  }
  RETURN_IF_ERROR(ReadActivations(node, s));
  return s;
}

// (a, b, c) -> (b, a, c): batch-first X and states to time/direction-major.
std::vector<double> Swap01(const std::vector<double>& v, int64_t a, int64_t b, int64_t c) {
  std::vector<double> out(v.size());
  for (int64_t i = 0; i < a; ++i) {
    for (int64_t j = 0; j < b; ++j) {
      for (int64_t k = 0; k < c; ++k) out[(j * a + i) * c + k] = v[(i * b + j) * c + k];
    }
  }
  return out;
}

struct RnnOperands {
  std::vector<double> x;        // (T, B, I)
  std::vector<double> w, r, b;  // (D, G*H, I), (D, G*H, H), (D, 2*G*H)
  std::vector<int64_t> lens;    // (B)
  std::vector<double> h0, c0;   // (D, B, H)
  std::vector<double> p;        // (D, 3*H)
};

// Optional input i as doubles of `shape` (zeros when absent).
absl::StatusOr<std::vector<double>> OptionalOperand(const Node& node, const KernelInputs& in,
                                                    size_t i, const Tensor& like,
                                                    const std::vector<int64_t>& shape) {
  if (i >= in.size() || !in[i]) return std::vector<double>(NumElements(shape), 0.0);
  if (in[i]->dtype() != like.dtype() || in[i]->shape() != shape) {
    return InvalidInput(node, "input " + std::to_string(i) + " must be " + ShapeToString(shape) +
                                  " of X's dtype, got " + ShapeToString(in[i]->shape()));
  }
  return ToDoubles(*in[i]);
}

// The initial hidden or cell state (input i), direction-major.
absl::StatusOr<std::vector<double>> InitialState(const Node& node, const KernelInputs& in, size_t i,
                                                 const RnnSpec& s) {
  const std::vector<int64_t> shape = s.batch_first
                                         ? std::vector<int64_t>{s.batch, s.dirs, s.hidden}
                                         : std::vector<int64_t>{s.dirs, s.batch, s.hidden};
  ASSIGN_OR_RETURN(std::vector<double> v, OptionalOperand(node, in, i, *in[0], shape));
  return s.batch_first ? Swap01(v, s.batch, s.dirs, s.hidden) : v;
}

absl::StatusOr<RnnOperands> ReadOperands(const Node& node, const KernelInputs& in,
                                         const RnnSpec& s) {
  RnnOperands op;
  const Tensor& x = *in[0];
  op.x = ToDoubles(x);
  if (s.batch_first) op.x = Swap01(op.x, s.batch, s.steps, s.input);
  op.w = ToDoubles(*in[1]);
  op.r = ToDoubles(*in[2]);
  ASSIGN_OR_RETURN(op.b, OptionalOperand(node, in, 3, x, {s.dirs, 2 * s.gates * s.hidden}));
  op.lens.assign(s.batch, s.steps);
  if (in.size() > 4 && in[4]) {
    if (!IsIntegerDType(in[4]->dtype()) || in[4]->numel() != s.batch) {
      return InvalidInput(node, "sequence_lens must hold one integer per batch entry");
    }
    op.lens = in[4]->ToInt64Vector();
    for (int64_t l : op.lens) {
      if (l < 0 || l > s.steps) return InvalidInput(node, "sequence length out of range");
    }
  }
  ASSIGN_OR_RETURN(op.h0, InitialState(node, in, 5, s));
  if (s.cell == Cell::kLstm) {
    ASSIGN_OR_RETURN(op.c0, InitialState(node, in, 6, s));
    ASSIGN_OR_RETURN(op.p, OptionalOperand(node, in, 7, x, {s.dirs, 3 * s.hidden}));
  }
  return op;
}

// One direction's weights and state for one batch entry.
struct CellState {
  const double *w, *r, *wb, *rb, *p;
  const Activation* act;  // this direction's activations
  std::vector<double> h, c;
};

// out[g*H + j] = sum_k m[g*H + j][k] * v[k] + bias[g*H + j].
void Affine(const double* m, const double* v, const double* bias, int64_t rows, int64_t cols,
            std::vector<double>& out) {
  out.assign(rows, 0.0);
  for (int64_t j = 0; j < rows; ++j) {
    double acc = bias[j];
    for (int64_t k = 0; k < cols; ++k) acc += m[j * cols + k] * v[k];
    out[j] = acc;
  }
}

double Clip(double v, double clip) { return clip > 0 ? std::clamp(v, -clip, clip) : v; }

// One time step of cell `s.cell` on input x, updating st.h (and st.c).
void Step(const RnnSpec& s, const double* x, CellState& st) {
  const int64_t hs = s.hidden, gh = s.gates * hs;
  std::vector<double> gx, gr;
  Affine(st.w, x, st.wb, gh, s.input, gx);
  Affine(st.r, st.h.data(), st.rb, gh, hs, gr);
  const Activation &f = st.act[0], &g = st.act[s.cell == Cell::kRnn ? 0 : 1];
  std::vector<double> h(hs);
  if (s.cell == Cell::kRnn) {
    for (int64_t j = 0; j < hs; ++j) h[j] = f(Clip(gx[j] + gr[j], s.clip));
  } else if (s.cell == Cell::kGru) {
    std::vector<double> z(hs), rh(hs);
    for (int64_t j = 0; j < hs; ++j) {
      z[j] = f(Clip(gx[j] + gr[j], s.clip));
      rh[j] = f(Clip(gx[hs + j] + gr[hs + j], s.clip)) * st.h[j];  // r (.) H
    }
    std::vector<double> hr;  // (r (.) H) Rh^T + Rbh, when the reset comes first
    if (!s.linear_before_reset) Affine(st.r + 2 * hs * hs, rh.data(), st.rb + 2 * hs, hs, hs, hr);
    for (int64_t j = 0; j < hs; ++j) {
      const double r = f(Clip(gx[hs + j] + gr[hs + j], s.clip));
      const double pre = s.linear_before_reset ? r * gr[2 * hs + j] : hr[j];
      const double cand = g(Clip(gx[2 * hs + j] + pre, s.clip));
      h[j] = (1 - z[j]) * cand + z[j] * st.h[j];
    }
  } else {
    const Activation& hact = st.act[2];
    for (int64_t j = 0; j < hs; ++j) {
      const double c_prev = st.c[j];
      const double i = f(Clip(gx[j] + gr[j] + st.p[j] * c_prev, s.clip));
      double fg = f(Clip(gx[2 * hs + j] + gr[2 * hs + j] + st.p[2 * hs + j] * c_prev, s.clip));
      if (s.input_forget) fg = 1 - i;
      const double cand = g(Clip(gx[3 * hs + j] + gr[3 * hs + j], s.clip));
      st.c[j] = fg * c_prev + i * cand;
      const double o = f(Clip(gx[hs + j] + gr[hs + j] + st.p[hs + j] * st.c[j], s.clip));
      h[j] = o * hact(st.c[j]);
    }
  }
  st.h = std::move(h);
}

struct RnnResult {
  std::vector<double> y, yh, yc;  // (T, D, B, H), (D, B, H), (D, B, H)
};

void RunDirection(const RnnSpec& s, const RnnOperands& op, int64_t d, RnnResult& res) {
  const int64_t hs = s.hidden, gh = s.gates * hs, per_dir = s.acts.size() / s.dirs;
  const bool reverse = s.reverse_only || d == 1;
  for (int64_t b = 0; b < s.batch; ++b) {
    CellState st{op.w.data() + d * gh * s.input,
                 op.r.data() + d * gh * hs,
                 op.b.data() + d * 2 * gh,
                 op.b.data() + d * 2 * gh + gh,
                 op.p.empty() ? nullptr : op.p.data() + d * 3 * hs,
                 s.acts.data() + d * per_dir,
                 {},
                 {}};
    const int64_t state = (d * s.batch + b) * hs;
    st.h.assign(op.h0.begin() + state, op.h0.begin() + state + hs);
    if (!op.c0.empty()) st.c.assign(op.c0.begin() + state, op.c0.begin() + state + hs);
    const int64_t len = op.lens[b];
    for (int64_t k = 0; k < len; ++k) {
      const int64_t t = reverse ? len - 1 - k : k;
      Step(s, op.x.data() + (t * s.batch + b) * s.input, st);
      std::copy(st.h.begin(), st.h.end(), res.y.begin() + ((t * s.dirs + d) * s.batch + b) * hs);
    }
    std::copy(st.h.begin(), st.h.end(), res.yh.begin() + state);
    if (!st.c.empty()) std::copy(st.c.begin(), st.c.end(), res.yc.begin() + state);
  }
}

// Y (T, D, B, H) -> (B, T, D, H) for layout 1.
std::vector<double> BatchFirstY(const std::vector<double>& y, const RnnSpec& s) {
  std::vector<double> out(y.size());
  const int64_t hs = s.hidden;
  for (int64_t t = 0; t < s.steps; ++t) {
    for (int64_t d = 0; d < s.dirs; ++d) {
      for (int64_t b = 0; b < s.batch; ++b) {
        for (int64_t k = 0; k < hs; ++k) {
          out[((b * s.steps + t) * s.dirs + d) * hs + k] =
              y[((t * s.dirs + d) * s.batch + b) * hs + k];
        }
      }
    }
  }
  return out;
}

// Y, Y_h (and Y_c) in the node's layout.
std::vector<Tensor> PackOutputs(const RnnSpec& s, const RnnResult& res, DType dt) {
  std::vector<Tensor> outs;
  if (!s.batch_first) {
    outs.push_back(FromDoubles(dt, {s.steps, s.dirs, s.batch, s.hidden}, res.y));
    outs.push_back(FromDoubles(dt, {s.dirs, s.batch, s.hidden}, res.yh));
    if (s.cell == Cell::kLstm) outs.push_back(FromDoubles(dt, {s.dirs, s.batch, s.hidden}, res.yc));
    return outs;
  }
  outs.push_back(FromDoubles(dt, {s.batch, s.steps, s.dirs, s.hidden}, BatchFirstY(res.y, s)));
  outs.push_back(
      FromDoubles(dt, {s.batch, s.dirs, s.hidden}, Swap01(res.yh, s.dirs, s.batch, s.hidden)));
  if (s.cell == Cell::kLstm) {
    outs.push_back(
        FromDoubles(dt, {s.batch, s.dirs, s.hidden}, Swap01(res.yc, s.dirs, s.batch, s.hidden)));
  }
  return outs;
}

absl::StatusOr<std::vector<Tensor>> Recurrent(const Node& node, const KernelInputs& in, Cell cell) {
  for (size_t i = 0; i < 3; ++i) RETURN_IF_ERROR(RequireInput(node, in, i).status());
  RETURN_IF_ERROR(CheckFloat(node, *in[0]));
  if (in[1]->dtype() != in[0]->dtype() || in[2]->dtype() != in[0]->dtype()) {
    return InvalidInput(node, "X, W and R must share one dtype");
  }
  ASSIGN_OR_RETURN(RnnSpec s, ReadSpec(node, in, cell));
  ASSIGN_OR_RETURN(RnnOperands op, ReadOperands(node, in, s));
  const int64_t state = s.dirs * s.batch * s.hidden;
  RnnResult res{std::vector<double>(s.steps * state, 0.0), std::vector<double>(state),
                std::vector<double>(cell == Cell::kLstm ? state : 0)};
  for (int64_t d = 0; d < s.dirs; ++d) RunDirection(s, op, d, res);
  return PackOutputs(s, res, in[0]->dtype());
}

}  // namespace

void RegisterRecurrentKernels(KernelRegistry& r) {
  r.Register("", "RNN",
             [](const Node& n, const KernelInputs& in) { return Recurrent(n, in, Cell::kRnn); });
  r.Register("", "GRU",
             [](const Node& n, const KernelInputs& in) { return Recurrent(n, in, Cell::kGru); });
  r.Register("", "LSTM",
             [](const Node& n, const KernelInputs& in) { return Recurrent(n, in, Cell::kLstm); });
}

}  // namespace kiln::ref::nn
