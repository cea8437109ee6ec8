// Evaluating a node whose inputs are all constant: the one rule the compiler (constant
// folding, shape inference) and the engines (constants computed once at build) share, so
// that none of them freezes a random generator into a constant.
#pragma once

#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::ref {

// Whether the node gives the same outputs for the same inputs (not RandomNormal[Like],
// RandomUniform[Like], Multinomial, Bernoulli, or a Dropout whose training_mode is not a
// constant false).
bool IsDeterministic(const Node& node);

// The node's outputs computed by its reference kernel over its constant inputs (an omitted
// optional input stays omitted). FAILED_PRECONDITION when an input is not constant or the
// node is not deterministic; the kernel's own error (UNIMPLEMENTED when it has none)
// otherwise. One tensor per node output.
absl::StatusOr<std::vector<Tensor>> EvaluateConstantNode(const Node& node);

}  // namespace kiln::ref
