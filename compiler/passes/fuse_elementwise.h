// fuse_elementwise: maximal groups of element-wise operators (numpy broadcasting included)
// become one ai.kiln FusedElementwise carrying a straight-line program over the group's
// inputs (compiler/ir/kiln_ops.h). The program is what the CPU executor and the CUDA code
// generator consume: one pass over memory instead of one per operator.
// A group grows backwards from its last node: a producer joins when it is element-wise, has
// one output, and every consumer of that output is already in the group (so no value the
// group hides is needed outside it) and the output is not a graph output.
// Preconditions: shapes inferred; run after the epilogue fusions (an activation right after a
// Conv belongs in the convolution's epilogue, not in a separate pass over memory).
// Leaves alone: single operators (nothing to gain), multi-output operators.
#pragma once

#include <string>

#include "compiler/passes/pass.h"

namespace kiln::passes {

bool IsFusibleElementwise(const Node& node);
absl::StatusOr<bool> FuseElementwise(Graph& graph);

class FuseElementwisePass : public Pass {
 public:
  std::string name() const override { return "fuse_elementwise"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return FuseElementwise(graph); }
};

}  // namespace kiln::passes
