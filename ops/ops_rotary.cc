// RotaryEmbedding (opset 23): rotates the first rotary_embedding_dim (default: all) features of
// every head by the position's angle. X is (B, H, S, D), or (B, S, H * D) with num_heads. The
// caches hold cos/sin of the angles, rotary_embedding_dim / 2 per position: indexed by
// position_ids (B, S) when given, else already (B, S, dim / 2). Pairs are (i, i + dim/2), or
// (2i, 2i + 1) when interleaved.
#include <cmath>

#include "ops/kernel_util.h"
#include "ops/nn_ops.h"

namespace kiln::ref::nn {
namespace {

struct RotaryDims {
  int64_t b = 0, s = 0, h = 0, d = 0, rot = 0;
  bool three_d = false;
  // Flat offset of element (b, s, h, 0) in X.
  int64_t Offset(int64_t ib, int64_t is, int64_t ih) const {
    return three_d ? ((ib * s + is) * h + ih) * d : ((ib * h + ih) * s + is) * d;
  }
};

absl::StatusOr<RotaryDims> ReadRotaryDims(const Node& node, const Tensor& x) {
  RotaryDims r;
  if (x.rank() != 3 && x.rank() != 4) return InvalidInput(node, "input must be 3-D or 4-D");
  r.three_d = x.rank() == 3;
  r.b = x.dim(0);
  if (r.three_d) {
    r.s = x.dim(1);
    r.h = node.GetInt("num_heads", 0);
    if (r.h <= 0 || x.dim(2) % r.h != 0) {
      return InvalidInput(node, "3-D input needs num_heads dividing the hidden size");
    }
    r.d = x.dim(2) / r.h;
  } else {
    r.h = x.dim(1);
    r.s = x.dim(2);
    r.d = x.dim(3);
  }
  r.rot = node.GetInt("rotary_embedding_dim", 0);
  if (r.rot == 0) r.rot = r.d;
  if (r.rot < 0 || r.rot > r.d || r.rot % 2 != 0) {
    return InvalidInput(node, "rotary_embedding_dim must be even and at most the head size");
  }
  return r;
}

// The cache row index for every (b, s): position_ids, or (b * S + s) without them.
absl::StatusOr<std::vector<int64_t>> CacheRows(const Node& node, const Tensor& cache,
                                               const Tensor* pos, const RotaryDims& r) {
  const int64_t half = r.rot / 2;
  std::vector<int64_t> rows(r.b * r.s);
  if (!pos) {
    if (cache.rank() != 3 || cache.dim(0) != r.b || cache.dim(1) != r.s || cache.dim(2) != half) {
      return InvalidInput(node, "without position_ids the caches must be (B, S, dim / 2)");
    }
    for (int64_t i = 0; i < r.b * r.s; ++i) rows[i] = i;
    return rows;
  }
  if (cache.rank() != 2 || cache.dim(1) != half) {
    return InvalidInput(node, "with position_ids the caches must be (max_position, dim / 2)");
  }
  if (pos->numel() != r.b * r.s || !IsIntegerDType(pos->dtype())) {
    return InvalidInput(node, "position_ids must be (B, S) integers");
  }
  rows = pos->ToInt64Vector();
  for (int64_t p : rows) {
    if (p < 0 || p >= cache.dim(0)) {
      return InvalidInput(node, "position id " + std::to_string(p) + " is outside the cache");
    }
  }
  return rows;
}

absl::StatusOr<std::vector<Tensor>> RotaryEmbedding(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* xt, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* ct, RequireInput(node, in, 1));
  ASSIGN_OR_RETURN(const Tensor* st, RequireInput(node, in, 2));
  RETURN_IF_ERROR(CheckFloat(node, *xt));
  if (ct->dtype() != xt->dtype() || st->dtype() != xt->dtype() || ct->shape() != st->shape()) {
    return InvalidInput(node, "cos and sin caches must match each other and X's dtype");
  }
  ASSIGN_OR_RETURN(RotaryDims r, ReadRotaryDims(node, *xt));
  const Tensor* pos = in.size() > 3 ? in[3] : nullptr;
  ASSIGN_OR_RETURN(std::vector<int64_t> rows, CacheRows(node, *ct, pos, r));
  const bool interleaved = node.GetInt("interleaved", 0) != 0;
  const std::vector<double> cs = ToDoubles(*ct), sn = ToDoubles(*st);
  std::vector<double> x = ToDoubles(*xt);
  const int64_t half = r.rot / 2;
  for (int64_t b = 0; b < r.b; ++b) {
    for (int64_t s = 0; s < r.s; ++s) {
      const double* c = cs.data() + rows[b * r.s + s] * half;
      const double* si = sn.data() + rows[b * r.s + s] * half;
      for (int64_t h = 0; h < r.h; ++h) {
        double* v = x.data() + r.Offset(b, s, h);
        for (int64_t i = 0; i < half; ++i) {
          double& x1 = v[interleaved ? 2 * i : i];
          double& x2 = v[interleaved ? 2 * i + 1 : i + half];
          const double real = c[i] * x1 - si[i] * x2, imag = si[i] * x1 + c[i] * x2;
          x1 = real;
          x2 = imag;
        }
      }
    }
  }
  return std::vector<Tensor>{FromDoubles(xt->dtype(), xt->shape(), x)};
}

}  // namespace

void RegisterRotaryKernels(KernelRegistry& r) {
  r.Register("", "RotaryEmbedding", RotaryEmbedding);
}

}  // namespace kiln::ref::nn
