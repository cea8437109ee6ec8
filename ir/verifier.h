// The IR verifier: run after import and after every pass (tests, debug builds). Checks SSA
// form (each value produced once), that every used value is defined (graph input, constant,
// or an earlier node's output), topological order, and that constants agree with their
// declared dtype and shape.
#pragma once

#include "base/status.h"
#include "ir/graph.h"

namespace kiln {

absl::Status VerifyGraph(const Graph& graph);

}  // namespace kiln
