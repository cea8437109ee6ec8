// Running a graph with static input shapes on the CPU engine, for `kiln check --backend cpu`.
#pragma once

#include <vector>

#include "compiler/compile.h"
#include "compiler/pipeline.h"
#include "runtime/reference/interpreter.h"

namespace kiln::tools {

struct CpuRun {
  CompiledGraph compiled;       // its graph's outputs declare what the engine produced
  std::vector<Tensor> outputs;  // one per graph output, in order
};

// Compiles `graph` (inputs already static; the batch is dim 0 of the first input) at `level`,
// builds the CPU engine and runs it once on `feeds` (by input name). When shapes depend on
// input values, small integer inputs are bound as constants and the build is retried (the
// engine serves static shapes); UNIMPLEMENTED when shapes stay data-dependent.
absl::StatusOr<CpuRun> RunOnCpuEngine(const Graph& graph, const ref::TensorMap& feeds,
                                      OptLevel level);

}  // namespace kiln::tools
