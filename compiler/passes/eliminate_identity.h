// eliminate_identity: removes nodes that pass their first input through unchanged, rewiring
// their consumers to that input: Identity, inference-mode Dropout, Cast/CastLike to the same
// dtype, Reshape/Expand/Flatten/Squeeze/Unsqueeze whose static output shape equals the input's,
// Transpose with the identity permutation, Pad with all-zero pads, Slice with unit steps that
// keeps the whole tensor.
// Preconditions: shapes inferred (static shapes are needed to prove reshapes are no-ops).
// Leaves alone: nodes whose output is a graph output (the output name is the model's
// contract), Dropout in training mode or whose mask output is used.
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::passes {

// The input `node` passes through unchanged, or nullptr when it is not a no-op.
Value* PassThroughInput(const Graph& graph, const Node& node);
absl::StatusOr<bool> EliminateIdentity(Graph& graph);

class EliminateIdentityPass : public Pass {
 public:
  std::string name() const override { return "eliminate_identity"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return EliminateIdentity(graph); }
};

}  // namespace kiln::passes
