#include "compiler/passes/fuse_matmul_epilogue.h"

#include "compiler/passes/epilogue_match.h"

namespace kiln::passes {
namespace {

// beta * C + bias as a new constant C of shape [N] (C is scalar or [N] or [1, N]) and
// beta = 1; nullopt when C does not vary along the last axis only.
std::optional<Tensor> MergeIntoC(const Value* c, float beta, const Tensor& bias) {
  const int64_t n = bias.numel();
  Tensor out(bias.dtype(), {n});
  for (int64_t k = 0; k < n; ++k) {
    double base = 0.0;
    if (c) {
      const Tensor& t = *c->constant;
      if (t.numel() != 1 && t.numel() != n) return std::nullopt;
      base = beta * t.GetDouble(t.numel() == 1 ? 0 : k);
    }
    out.SetDouble(k, base + bias.GetDouble(k));
  }
  return out;
}

bool FuseOne(EpilogueFuser& fuser, Node& mm) {
  Value* y = mm.output(0);
  if (!y || !y->shape || y->shape->empty() || !y->shape->back().known()) return false;
  const bool gemm = mm.op_type == "Gemm";
  Value* c = gemm ? mm.input(2) : nullptr;
  EpilogueOptions o;
  o.channel_axis = -1;
  o.channels = y->shape->back().value;
  o.allow_bias = !c || c->constant;
  EpilogueMatch m = fuser.Match(y, o);
  if (m.swallowed.empty()) return false;
  auto fused = std::make_unique<Node>();
  fused->name = mm.name;
  fused->op_type = kiln_ops::kFusedMatMul;
  fused->domain = kKilnDomain;
  fused->opset = 1;
  if (gemm) fused->attrs = mm.attrs;
  if (m.bias) {
    std::optional<Tensor> merged = MergeIntoC(c, mm.GetFloat("beta", 1.0f), *m.bias);
    if (!merged) return false;
    c = fuser.graph().AddConstant(mm.name + "_bias", std::move(*merged));
    fused->attrs["beta"] = Attribute::Float(1.0f);
  }
  fused->inputs = {mm.input(0), mm.input(1), c};
  fused->inputs.insert(fused->inputs.end(), m.residuals.begin(), m.residuals.end());
  kiln_ops::WriteEpilogue(*fused, m.steps);
  fuser.Replace(&mm, m, std::move(fused));
  return true;
}

}  // namespace

absl::StatusOr<bool> FuseMatMulEpilogue(Graph& graph) {
  std::vector<Node*> mms;
  for (const auto& n : graph.nodes()) {
    if (n->domain.empty() && (n->op_type == "MatMul" || n->op_type == "Gemm")) {
      mms.push_back(n.get());
    }
  }
  EpilogueFuser fuser(graph);
  for (Node* n : mms) FuseOne(fuser, *n);
  const bool changed = fuser.Finish();
  if (changed) graph.PruneUnusedValues();
  return changed;
}

}  // namespace kiln::passes
