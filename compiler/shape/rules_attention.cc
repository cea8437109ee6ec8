// Shape rules for Attention (opsets 23, 24) and RotaryEmbedding (X's shape): Y is (B, Hq, Sq, Dv),
// or (B, Sq, Hq * Dv) for 3-D inputs; present_key/present_value are (B, Hkv, P + Skv, D) with P the
// past length; the qk_matmul_output is (B, Hq, Sq, P + Skv).
#include "compiler/shape/nn_rules.h"
#include "compiler/shape/shape_util.h"

namespace kiln::shape {
namespace {

// a / b when a is known (b > 0), else unknown.
Dim DivDim(const Dim& a, int64_t b) { return a.known() ? Dim(a.value / b) : Dim(); }
// a * b when a is known, else unknown.
Dim MulDim(const Dim& a, int64_t b) { return a.known() ? Dim(a.value * b) : Dim(); }

Dim AddDims(const Dim& a, const Dim& b) {
  if (a.known() && b.known()) return Dim(a.value + b.value);
  if (b.known() && b.value == 0) return a;
  return Dim();
}

struct AttnShapes {
  Dim b, hq, hkv, sq, skv, dk, dv;
};

absl::StatusOr<AttnShapes> ReadShapes(const InferContext& ctx, const Shape& q, const Shape& k,
                                      const Shape& v) {
  if (q.size() != k.size() || q.size() != v.size() || (q.size() != 3 && q.size() != 4)) {
    return ctx.Invalid("Q, K and V must all be 3-D or all 4-D");
  }
  AttnShapes s;
  s.b = q[0];
  if (q.size() == 4) {
    s = {q[0], q[1], k[1], q[2], k[2], k[3], v[3]};
    return s;
  }
  const int64_t hq = ctx.node().GetInt("q_num_heads", 0);
  const int64_t hkv = ctx.node().GetInt("kv_num_heads", 0);
  if (hq <= 0 || hkv <= 0) return ctx.Invalid("3-D inputs need q_num_heads and kv_num_heads");
  for (const auto& [dim, heads] : {std::pair{q[2], hq}, {k[2], hkv}, {v[2], hkv}}) {
    if (dim.known() && dim.value % heads != 0) {
      return ctx.Invalid("hidden size " + std::to_string(dim.value) + " is not divisible by " +
                         std::to_string(heads) + " heads");
    }
  }
  s = {q[0], Dim(hq), Dim(hkv), q[1], k[1], DivDim(k[2], hkv), DivDim(v[2], hkv)};
  return s;
}

absl::Status AttentionRule(InferContext& ctx) {
  const std::optional<Shape> q = ctx.input_shape(0), k = ctx.input_shape(1), v = ctx.input_shape(2);
  const DType dt = ctx.input_dtype(0);
  if (!q || !k || !v) {
    for (size_t i = 0; i < 4; ++i) ctx.set_output(i, dt, std::nullopt);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(AttnShapes s, ReadShapes(ctx, *q, *k, *v));
  if (s.hq.known() && s.hkv.known() && (s.hkv.value == 0 || s.hq.value % s.hkv.value != 0)) {
    return ctx.Invalid("q heads must be a multiple of kv heads");
  }
  Dim past(0);
  if (ctx.has_input(4)) {
    const std::optional<Shape> p = ctx.input_shape(4);
    past = p && p->size() == 4 ? (*p)[2] : Dim();
  }
  const Dim total = AddDims(s.skv, past);
  if (q->size() == 4) {
    ctx.set_output(0, dt, Shape{s.b, s.hq, s.sq, s.dv});
  } else {
    ctx.set_output(0, dt, Shape{s.b, s.sq, s.dv.known() ? MulDim(s.hq, s.dv.value) : Dim()});
  }
  ctx.set_output(1, dt, Shape{s.b, s.hkv, total, s.dk});
  ctx.set_output(2, dt, Shape{s.b, s.hkv, total, s.dv});
  ctx.set_output(3, dt, Shape{s.b, s.hq, s.sq, total});
  return absl::OkStatus();
}

}  // namespace

void RegisterAttentionRules(RuleRegistry& r) {
  r.Register("", "Attention", AttentionRule);
  // RotaryEmbedding keeps X's shape and dtype.
  r.Register("", "RotaryEmbedding", [](InferContext& ctx) {
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
    return absl::OkStatus();
  });
}

}  // namespace kiln::shape
