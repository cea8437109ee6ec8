// eliminate_common_subexpressions: two nodes with the same operator, attributes and inputs
// compute the same values; the later one is removed and its consumers read the earlier one's
// outputs. Identical constants (same dtype, shape and bytes) are merged first, so nodes fed
// by duplicated weights or shape constants also match.
// Preconditions: none. Leaves alone: non-deterministic operators, nodes whose outputs are
// graph outputs (their names are the model's contract).
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::passes {

absl::StatusOr<bool> EliminateCommonSubexpressions(Graph& graph);

class EliminateCommonSubexpressionsPass : public Pass {
 public:
  std::string name() const override { return "eliminate_common_subexpressions"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override {
    return EliminateCommonSubexpressions(graph);
  }
};

}  // namespace kiln::passes
