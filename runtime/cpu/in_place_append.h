// Internal to runtime/cpu: which Concats of an engine may take their first input as already
// in place in their output (runtime::Engine::RunAppending). A decoder step's
// `present = Concat(past, new)` qualifies when `past` is a graph input that nothing else
// reads and `present` is a graph output written straight into the caller's tensor: a
// generation loop then keeps the cache in the present tensors and the step copies only the
// new positions.
#pragma once

#include <vector>

#include "ir/graph.h"
#include "runtime/cpu/slot_table.h"
#include "runtime/engine.h"

namespace kiln::cpu {

// The slots of graph inputs that exactly one node reads (once) and that no graph output
// repeats. None when a node carries a subgraph: a branch or loop body may read an outer
// value without listing it.
std::vector<int> SoleReadInputs(const Graph& graph, const SlotBindings& bind,
                                const BuildContext& ctx);

// The kernels' (input slot, output slot) appends as engine input and output indices; a pair
// whose output slot is bound to more than one output is left out.
std::vector<runtime::InPlaceAppend> AppendsOf(const BuildContext& ctx, const SlotBindings& bind);

}  // namespace kiln::cpu
