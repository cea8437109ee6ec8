// simplify_reshapes: layout bookkeeping that exporters leave in chains.
//  - A chain of Reshape/Flatten/Squeeze/Unsqueeze collapses into one Reshape of the chain's
//    input to a constant target: the chain's final static shape (allowzero=1 when it holds a
//    0 dim, so the 0 is not read as "copy the input dim").
//  - Transpose(Transpose(x, p1), p2) becomes Transpose(x, q) with q[i] = p1[p2[i]]; when q is
//    the identity both go (the output's readers read x; a graph output becomes Identity(x)).
//  - Every Reshape/Flatten/Squeeze/Unsqueeze gets the int attribute kiln_view=1: its output
//    is its input's bytes, so the memory planner gives both one buffer.
// Preconditions: shapes inferred; the chain's output shape static (after Specialize).
// Leaves alone: an intermediate value with another reader or that is a graph output (it must
// stay computed, so the chain cannot be shortened around it), chains whose final shape is
// not static (a constant target would freeze a symbolic dim), Transposes whose permutation
// is unknown (no perm and unknown input rank). Note: kiln_view is a Kiln-internal attribute;
// an exporter writing optimized graphs for other runtimes must drop it.
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::passes {

absl::StatusOr<bool> SimplifyReshapes(Graph& graph);

class SimplifyReshapesPass : public Pass {
 public:
  std::string name() const override { return "simplify_reshapes"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return SimplifyReshapes(graph); }
};

}  // namespace kiln::passes
