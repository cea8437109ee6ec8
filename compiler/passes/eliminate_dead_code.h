// eliminate_dead_code: removes nodes none of whose outputs reach a graph output, then drops
// values nothing references (unused initializers included).
// Preconditions: none. Leaves alone: graph inputs (they are the model's signature, even when
// unused), nodes with any live output (an unused second output of a live node stays).
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::passes {

absl::StatusOr<bool> EliminateDeadCode(Graph& graph);

class EliminateDeadCodePass : public Pass {
 public:
  std::string name() const override { return "eliminate_dead_code"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return EliminateDeadCode(graph); }
};

}  // namespace kiln::passes
