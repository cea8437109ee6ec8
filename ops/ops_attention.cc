// Attention (opsets 23 and 24): scaled dot-product attention over Q (B, Hq, Sq, D) and
// K/V (B, Hkv, Skv, D/Dv), or their 3-D forms (B, S, H * D) split into q_num_heads /
// kv_num_heads. Past key/value caches are concatenated in front of K/V (and returned as the
// present ones); grouped-query attention shares each KV head among Hq / Hkv query heads.
//
// The bias added to the scaled scores Q·Kᵀ is built from: attn_mask (float: added; bool: False
// is -inf), padded with -inf up to the total key length when shorter; is_causal (query i sees
// key j iff j <= i + offset, where offset is the past length, or nonpad_kv_seqlen[b] - Sq when
// there is no past); nonpad_kv_seqlen (keys at or after it are -inf). softcap (> 0) maps the
// scores through softcap·tanh(s/softcap) before the bias, so masked keys stay -inf. A row
// whose keys are all masked gives zero weights (and a zero output), not NaN.
//
// qk_matmul_output_mode: 0 the scaled (softcapped) scores, 1 the same, 2 scores + bias,
// 3 the softmax weights. Everything computes in double and rounds once.
#include <cmath>
#include <limits>

#include "ops/kernel_util.h"
#include "ops/nn_ops.h"

namespace kiln::ref::nn {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct AttnDims {
  int64_t b = 0, hq = 0, hkv = 0, sq = 0, skv = 0, past = 0, dk = 0, dv = 0;
  int64_t total() const { return past + skv; }
  bool three_d = false;
};

// t (B, S, H * D) or (B, H, S, D) as doubles in (B, H, S, D) order.
std::vector<double> ToHeadMajor(const Tensor& t, int64_t heads, bool three_d) {
  std::vector<double> v = ToDoubles(t);
  if (!three_d) return v;
  const int64_t b = t.dim(0), s = t.dim(1), d = t.dim(2) / heads;
  std::vector<double> out(v.size());
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t j = 0; j < s; ++j) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t k = 0; k < d; ++k) {
          out[((i * heads + h) * s + j) * d + k] = v[((i * s + j) * heads + h) * d + k];
        }
      }
    }
  }
  return out;
}

// The head counts and sizes of the 3-D form; INVALID_ARGUMENT when they do not divide.
absl::Status SplitHeads3D(const Node& node, const Tensor& q, const Tensor& k, const Tensor& v,
                          AttnDims& d) {
  d.hq = node.GetInt("q_num_heads", 0);
  d.hkv = node.GetInt("kv_num_heads", 0);
  if (d.hq <= 0 || d.hkv <= 0) {
    return InvalidInput(node, "3-D inputs need positive q_num_heads and kv_num_heads");
  }
  if (q.dim(2) % d.hq != 0 || k.dim(2) % d.hkv != 0 || v.dim(2) % d.hkv != 0) {
    return InvalidInput(node, "hidden sizes must be divisible by the head counts");
  }
  d.sq = q.dim(1);
  d.skv = k.dim(1);
  d.dk = k.dim(2) / d.hkv;
  d.dv = v.dim(2) / d.hkv;
  if (q.dim(2) / d.hq != d.dk) return InvalidInput(node, "Q and K head sizes differ");
  return absl::OkStatus();
}

absl::StatusOr<AttnDims> ReadDims(const Node& node, const Tensor& q, const Tensor& k,
                                  const Tensor& v) {
  AttnDims d;
  if (q.rank() != k.rank() || q.rank() != v.rank() || (q.rank() != 3 && q.rank() != 4)) {
    return InvalidInput(node, "Q, K and V must all be 3-D or all 4-D");
  }
  d.three_d = q.rank() == 3;
  d.b = q.dim(0);
  if (k.dim(0) != d.b || v.dim(0) != d.b) return InvalidInput(node, "batch sizes differ");
  if (d.three_d) {
    RETURN_IF_ERROR(SplitHeads3D(node, q, k, v, d));
  } else {
    d.hq = q.dim(1);
    d.hkv = k.dim(1);
    d.sq = q.dim(2);
    d.skv = k.dim(2);
    d.dk = k.dim(3);
    d.dv = v.dim(3);
    if (q.dim(3) != d.dk) return InvalidInput(node, "Q and K head sizes differ");
    if (v.dim(1) != d.hkv) return InvalidInput(node, "K and V head counts differ");
  }
  if (v.dim(d.three_d ? 1 : 2) != d.skv) return InvalidInput(node, "K and V lengths differ");
  if (d.hkv == 0 || d.hq % d.hkv != 0) {
    return InvalidInput(node, "q heads (" + std::to_string(d.hq) +
                                  ") must be a multiple of kv heads (" + std::to_string(d.hkv) +
                                  ")");
  }
  return d;
}

// cur (B, H, S, D) behind past (B, H, P, D) along the sequence axis.
absl::StatusOr<std::vector<double>> WithPast(const Node& node, const Tensor* past,
                                             const std::vector<double>& cur, const AttnDims& d,
                                             int64_t heads, int64_t dim) {
  if (!past) return cur;
  if (past->rank() != 4 || past->dim(0) != d.b || past->dim(1) != heads || past->dim(2) != d.past ||
      past->dim(3) != dim) {
    return InvalidInput(
        node, "past key/value " + ShapeToString(past->shape()) + " does not fit the current ones");
  }
  std::vector<double> p = ToDoubles(*past), out;
  out.reserve(p.size() + cur.size());
  for (int64_t bh = 0; bh < d.b * heads; ++bh) {
    out.insert(out.end(), p.begin() + bh * d.past * dim, p.begin() + (bh + 1) * d.past * dim);
    out.insert(out.end(), cur.begin() + bh * d.skv * dim, cur.begin() + (bh + 1) * d.skv * dim);
  }
  return out;
}

// attn_mask as an additive bias broadcast to (B, Hq, Sq, L), padded with -inf past its end.
absl::StatusOr<std::vector<double>> MaskBias(const Node& node, const Tensor* mask,
                                             const AttnDims& d) {
  const int64_t l = d.total();
  std::vector<double> bias(d.b * d.hq * d.sq * l, 0.0);
  if (!mask) return bias;
  if (mask->rank() < 2 || mask->rank() > 4 || mask->dim(mask->rank() - 1) > l) {
    return InvalidInput(
        node, "attn_mask " + ShapeToString(mask->shape()) + " does not broadcast to the scores");
  }
  std::vector<int64_t> padded = mask->shape();
  const int64_t ml = padded.back();
  padded.back() = l;
  const std::vector<int64_t> full{d.b, d.hq, d.sq, l};
  ASSIGN_OR_RETURN(std::vector<int64_t> joint, BroadcastShapes(node, {padded, full}));
  if (joint != full) {
    return InvalidInput(
        node, "attn_mask " + ShapeToString(mask->shape()) + " does not broadcast to the scores");
  }
  const bool is_bool = mask->dtype() == DType::kBool;
  const std::vector<double> m = ToDoubles(*mask);
  BroadcastIndexer idx(padded, full);
  for (int64_t i = 0; i < static_cast<int64_t>(bias.size()); ++i) {
    const int64_t j = i % l;
    if (j >= ml) {
      bias[i] = kNegInf;
      continue;
    }
    const int64_t flat = idx(i);  // index into the padded mask
    const double v = m[flat / l * ml + flat % l];
    bias[i] = is_bool ? (v != 0.0 ? 0.0 : kNegInf) : v;
  }
  return bias;
}

// Adds the causal frontier and the nonpad_kv_seqlen padding to the bias.
absl::Status AddCausalAndPadding(const Node& node, const Tensor* nonpad, bool has_past,
                                 const AttnDims& d, std::vector<double>& bias) {
  std::vector<int64_t> lens;
  if (nonpad) {
    if (nonpad->numel() != d.b || !IsIntegerDType(nonpad->dtype())) {
      return InvalidInput(node, "nonpad_kv_seqlen must hold one integer per batch");
    }
    lens = nonpad->ToInt64Vector();
  }
  const bool causal = node.GetInt("is_causal", 0) != 0;
  const int64_t l = d.total();
  for (int64_t b = 0; b < d.b; ++b) {
    const int64_t offset = has_past || !nonpad ? d.past : lens[b] - d.sq;
    for (int64_t h = 0; h < d.hq; ++h) {
      for (int64_t i = 0; i < d.sq; ++i) {
        double* row = bias.data() + ((b * d.hq + h) * d.sq + i) * l;
        for (int64_t j = 0; j < l; ++j) {
          if ((causal && j > i + offset) || (nonpad && j >= lens[b])) row[j] = kNegInf;
        }
      }
    }
  }
  return absl::OkStatus();
}

// Softmax of one row in place. All keys masked (every score -inf): zero weights. NaN or +inf
// scores make the row NaN, as numpy's max-subtracted softmax does.
void SoftmaxRow(double* row, int64_t n) {
  double mx = kNegInf;
  bool nan = false;
  for (int64_t j = 0; j < n; ++j) {
    nan = nan || std::isnan(row[j]);
    mx = std::max(mx, row[j]);
  }
  if (nan || mx == kNegInf) {
    for (int64_t j = 0; j < n; ++j) row[j] = nan ? NAN : 0.0;
    return;
  }
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(row[j] - mx);
  for (int64_t j = 0; j < n; ++j) row[j] = std::exp(row[j] - mx) / sum;
}

struct AttnResult {
  std::vector<double> y;   // (B, Hq, Sq, Dv)
  std::vector<double> qk;  // (B, Hq, Sq, L), per qk_matmul_output_mode
};

// Scores, softmax and the weighted sum for every (batch, query head).
AttnResult Attend(const Node& node, const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v, const std::vector<double>& bias, const AttnDims& d,
                  double scale) {
  const double softcap = node.GetFloat("softcap", 0.0f);
  const int64_t mode = node.GetInt("qk_matmul_output_mode", 0), l = d.total();
  const int64_t group = d.hq / d.hkv;
  AttnResult r{std::vector<double>(d.b * d.hq * d.sq * d.dv, 0.0),
               std::vector<double>(bias.size())};
  std::vector<double> row(l);
  for (int64_t b = 0; b < d.b; ++b) {
    for (int64_t h = 0; h < d.hq; ++h) {
      const double* kh = k.data() + (b * d.hkv + h / group) * l * d.dk;
      const double* vh = v.data() + (b * d.hkv + h / group) * l * d.dv;
      for (int64_t i = 0; i < d.sq; ++i) {
        const int64_t ri = (b * d.hq + h) * d.sq + i;
        const double* qi = q.data() + ri * d.dk;
        for (int64_t j = 0; j < l; ++j) {
          double s = 0.0;
          for (int64_t c = 0; c < d.dk; ++c) s += qi[c] * kh[j * d.dk + c];
          s *= scale;
          if (softcap > 0) s = softcap * std::tanh(s / softcap);
          row[j] = s + bias[ri * l + j];
          r.qk[ri * l + j] = mode == 2 ? row[j] : s;
        }
        SoftmaxRow(row.data(), l);
        if (mode == 3) std::copy(row.begin(), row.end(), r.qk.begin() + ri * l);
        double* yi = r.y.data() + ri * d.dv;
        for (int64_t j = 0; j < l; ++j) {
          for (int64_t c = 0; c < d.dv; ++c) yi[c] += row[j] * vh[j * d.dv + c];
        }
      }
    }
  }
  return r;
}

// (B, H, S, D) back to the 3-D form (B, S, H * D).
std::vector<double> ToSequenceMajor(const std::vector<double>& v, int64_t b, int64_t heads,
                                    int64_t s, int64_t d) {
  std::vector<double> out(v.size());
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t j = 0; j < s; ++j) {
        for (int64_t k = 0; k < d; ++k) {
          out[((i * s + j) * heads + h) * d + k] = v[((i * heads + h) * s + j) * d + k];
        }
      }
    }
  }
  return out;
}

absl::Status CheckAttnDTypes(const Node& node, const KernelInputs& in) {
  RETURN_IF_ERROR(CheckFloat(node, *in[0]));
  for (size_t i : {1, 2, 4, 5}) {
    if (i < in.size() && in[i] && in[i]->dtype() != in[0]->dtype()) {
      return InvalidInput(node, "input " + std::to_string(i) + " must have Q's dtype");
    }
  }
  if (in.size() > 3 && in[3] && in[3]->dtype() != DType::kBool) {
    RETURN_IF_ERROR(CheckFloat(node, *in[3]));
  }
  return absl::OkStatus();
}

const Tensor* Optional(const KernelInputs& in, size_t i) { return i < in.size() ? in[i] : nullptr; }

absl::StatusOr<std::vector<Tensor>> AttentionKernel(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* qt, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* kt, RequireInput(node, in, 1));
  ASSIGN_OR_RETURN(const Tensor* vt, RequireInput(node, in, 2));
  RETURN_IF_ERROR(CheckAttnDTypes(node, in));
  ASSIGN_OR_RETURN(AttnDims d, ReadDims(node, *qt, *kt, *vt));
  const Tensor* past_k = Optional(in, 4);
  const Tensor* past_v = Optional(in, 5);
  if ((past_k == nullptr) != (past_v == nullptr)) {
    return InvalidInput(node, "past_key and past_value come together");
  }
  d.past = past_k && past_k->rank() == 4 ? past_k->dim(2) : 0;
  ASSIGN_OR_RETURN(std::vector<double> k,
                   WithPast(node, past_k, ToHeadMajor(*kt, d.hkv, d.three_d), d, d.hkv, d.dk));
  ASSIGN_OR_RETURN(std::vector<double> v,
                   WithPast(node, past_v, ToHeadMajor(*vt, d.hkv, d.three_d), d, d.hkv, d.dv));
  ASSIGN_OR_RETURN(std::vector<double> bias, MaskBias(node, Optional(in, 3), d));
  RETURN_IF_ERROR(AddCausalAndPadding(node, Optional(in, 6), past_k != nullptr, d, bias));
  const double scale = node.HasAttr("scale") ? node.GetFloat("scale", 1.0f)
                                             : 1.0 / std::sqrt(static_cast<double>(d.dk));
  const AttnResult r = Attend(node, ToHeadMajor(*qt, d.hq, d.three_d), k, v, bias, d, scale);
  const DType dt = qt->dtype();
  std::vector<Tensor> outs;
  if (d.three_d) {
    outs.push_back(
        FromDoubles(dt, {d.b, d.sq, d.hq * d.dv}, ToSequenceMajor(r.y, d.b, d.hq, d.sq, d.dv)));
  } else {
    outs.push_back(FromDoubles(dt, {d.b, d.hq, d.sq, d.dv}, r.y));
  }
  outs.push_back(FromDoubles(dt, {d.b, d.hkv, d.total(), d.dk}, k));
  outs.push_back(FromDoubles(dt, {d.b, d.hkv, d.total(), d.dv}, v));
  outs.push_back(FromDoubles(dt, {d.b, d.hq, d.sq, d.total()}, r.qk));
  return outs;
}

}  // namespace

void RegisterAttentionKernels(KernelRegistry& r) { r.Register("", "Attention", AttentionKernel); }

}  // namespace kiln::ref::nn
