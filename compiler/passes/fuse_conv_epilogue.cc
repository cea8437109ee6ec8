#include "compiler/passes/fuse_conv_epilogue.h"

#include "compiler/passes/epilogue_match.h"

namespace kiln::passes {
namespace {

// Existing bias (constant or absent) plus the matched per-channel bias.
Tensor MergeBias(const Value* existing, const Tensor& add) {
  Tensor b(add.dtype(), add.shape());
  for (int64_t k = 0; k < add.numel(); ++k) {
    double base = existing ? existing->constant->GetDouble(k) : 0.0;
    b.SetDouble(k, base + add.GetDouble(k));
  }
  return b;
}

bool FuseOne(EpilogueFuser& fuser, Node& conv) {
  Value* y = conv.output(0);
  if (!y || !y->shape || y->shape->size() < 3) return false;
  EpilogueOptions o;
  o.channel_axis = 1;
  o.channels = (*y->shape)[1].known() ? (*y->shape)[1].value : -1;
  Value* bias = conv.input(2);
  o.allow_bias = !bias || bias->constant;
  EpilogueMatch m = fuser.Match(y, o);
  if (m.swallowed.empty()) return false;
  auto fused = std::make_unique<Node>();
  fused->name = conv.name;
  fused->op_type = kiln_ops::kFusedConv;
  fused->domain = kKilnDomain;
  fused->opset = 1;
  fused->attrs = conv.attrs;
  if (m.bias) bias = fuser.graph().AddConstant(conv.name + "_bias", MergeBias(bias, *m.bias));
  fused->inputs = {conv.input(0), conv.input(1), bias};
  fused->inputs.insert(fused->inputs.end(), m.residuals.begin(), m.residuals.end());
  kiln_ops::WriteEpilogue(*fused, m.steps);
  fuser.Replace(&conv, m, std::move(fused));
  return true;
}

}  // namespace

absl::StatusOr<bool> FuseConvEpilogue(Graph& graph) {
  std::vector<Node*> convs;
  for (const auto& n : graph.nodes()) {
    if (n->domain.empty() && n->op_type == "Conv") convs.push_back(n.get());
  }
  EpilogueFuser fuser(graph);
  for (Node* c : convs) FuseOne(fuser, *c);
  const bool changed = fuser.Finish();
  if (changed) graph.PruneUnusedValues();
  return changed;
}

}  // namespace kiln::passes
