// Internal to runtime/cpu: the slot table of an engine, built from the graph and its memory
// plan: one slot per graph input, constant, output and planned value, with the storage the
// plan gave it, its last consuming step, and whether it may be stored blocked.
#pragma once

#include <vector>

#include "runtime/cpu/build_context.h"

namespace kiln::cpu {

struct SlotBindings {
  std::vector<int> inputs;   // slot per graph input
  std::vector<int> outputs;  // slot per graph output (may repeat, may be an input/constant)
  std::vector<std::pair<int, int>> views;  // external view slot -> root slot, bound per run
};

absl::StatusOr<SlotBindings> BuildSlots(const Graph& graph, const plan::MemoryPlan& plan,
                                        BuildContext& ctx);

}  // namespace kiln::cpu
