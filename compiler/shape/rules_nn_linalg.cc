// Shape rules for Gemm, MatMul (numpy batched broadcasting, 1-D operands) and Einsum.
#include "compiler/shape/nn_rules.h"
#include "compiler/shape/shape_util.h"
#include "ops/nn_einsum.h"

namespace kiln::shape {
namespace {

// Two dims that must be equal: an error only when both are known and differ.
absl::Status CheckSameDim(const InferContext& ctx, const Dim& a, const Dim& b,
                          const std::string& what) {
  if (a.known() && b.known() && a.value != b.value) {
    return ctx.Invalid(what + " differ: " + std::to_string(a.value) + " vs " +
                       std::to_string(b.value));
  }
  return absl::OkStatus();
}

absl::Status GemmRule(InferContext& ctx) {
  std::optional<Shape> a = ctx.input_shape(0), b = ctx.input_shape(1);
  if ((a && a->size() != 2) || (b && b->size() != 2)) return ctx.Invalid("A and B must be 2-D");
  const bool ta = ctx.node().GetInt("transA", 0) != 0, tb = ctx.node().GetInt("transB", 0) != 0;
  Shape out{Dim(), Dim()};
  if (a) out[0] = (*a)[ta ? 1 : 0];
  if (b) out[1] = (*b)[tb ? 0 : 1];
  if (a && b) RETURN_IF_ERROR(CheckSameDim(ctx, (*a)[ta ? 0 : 1], (*b)[tb ? 1 : 0], "inner dims"));
  ctx.set_output(0, ctx.input_dtype(0), out);
  return absl::OkStatus();
}

absl::Status MatMulRule(InferContext& ctx) {
  ASSIGN_OR_RETURN(std::optional<Shape> out, MatMulOutputShape(ctx, 0, 1));
  ctx.set_output(0, ctx.input_dtype(0), out);
  return absl::OkStatus();
}

// How much a dim says about an einsum label's size: a known size other than 1 is the size (1
// broadcasts), then a symbol, then an unknown dim; a known 1 says least.
int DimScore(const Dim& d) {
  if (d.known()) return d.value != 1 ? 3 : 0;
  return d.param.empty() ? 1 : 2;
}

Dim EinsumDim(const ref::nn::EinsumLabels& e, const std::vector<Shape>& shapes, int label) {
  Dim best;
  int best_score = -1;
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (size_t d = 0; d < shapes[i].size(); ++d) {
      if (e.inputs[i][d] == label && DimScore(shapes[i][d]) > best_score) {
        best = shapes[i][d];
        best_score = DimScore(best);
      }
    }
  }
  return best;
}

absl::Status EinsumRule(InferContext& ctx) {
  std::vector<Shape> shapes;
  std::vector<int64_t> ranks;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    std::optional<Shape> s = ctx.input_shape(i);
    if (!s) {
      ctx.set_output(0, ctx.input_dtype(0), std::nullopt);
      return absl::OkStatus();
    }
    ranks.push_back(static_cast<int64_t>(s->size()));
    shapes.push_back(std::move(*s));
  }
  ASSIGN_OR_RETURN(ref::nn::EinsumLabels e, ref::nn::ParseEinsum(ctx.node(), ranks));
  Shape out;
  for (int label : e.output) out.push_back(EinsumDim(e, shapes, label));
  ctx.set_output(0, ctx.input_dtype(0), out);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::optional<Shape>> MatMulOutputShape(const InferContext& ctx, size_t ai,
                                                       size_t bi) {
  return MatMulShapes(ctx, ctx.input_shape(ai), ctx.input_shape(bi));
}

absl::StatusOr<std::optional<Shape>> MatMulShapes(const InferContext& ctx, std::optional<Shape> a,
                                                  std::optional<Shape> b) {
  if (!a || !b) return std::optional<Shape>();
  if (a->empty() || b->empty()) return ctx.Invalid("MatMul operands must have rank >= 1");
  const bool a_vec = a->size() == 1, b_vec = b->size() == 1;
  if (a_vec) a->insert(a->begin(), Dim(1));
  if (b_vec) b->push_back(Dim(1));
  RETURN_IF_ERROR(CheckSameDim(ctx, a->back(), (*b)[b->size() - 2], "inner dims"));
  Shape a_batch(a->begin(), a->end() - 2), b_batch(b->begin(), b->end() - 2);
  ASSIGN_OR_RETURN(Shape out, BroadcastShapes(ctx, {a_batch, b_batch}));
  if (!a_vec) out.push_back((*a)[a->size() - 2]);
  if (!b_vec) out.push_back(b->back());
  return std::optional<Shape>(out);
}

void RegisterNnLinalgRules(RuleRegistry& r) {
  r.Register("", "Gemm", GemmRule);
  r.Register("", "MatMul", MatMulRule);
  r.Register("", "Einsum", EinsumRule);
}

}  // namespace kiln::shape
