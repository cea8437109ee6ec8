// Running a graph with static input shapes on the CPU engine, for `kiln check --backend cpu`.
#pragma once

#include <vector>

#include "compiler/compile.h"
#include "compiler/pipeline.h"
#include "ops/interpreter.h"
#include "runtime/cpu/cpu_engine.h"

namespace kiln::tools {

struct LayoutRun {
  std::string layout;           // the engine's activation layout ("primitive", "blocked")
  std::vector<Tensor> outputs;  // one per graph output, in order
};

struct CpuRun {
  CompiledGraph compiled;  // its graph's outputs declare what the engines produced
  std::vector<LayoutRun> runs;
};

// Compiles `graph` (inputs already static; the batch is dim 0 of the first input) at `level`,
// builds the CPU engine once per layout in `layouts` (kPrimitive / kBlocked; the second and
// later only when the graph has a layout choice, since otherwise the engines are the same)
// and runs each once on `feeds` (by input name). When shapes depend on
// input values, small integer inputs are bound as constants and the build is retried (the
// engine serves static shapes); UNIMPLEMENTED when shapes stay data-dependent.
absl::StatusOr<CpuRun> RunOnCpuEngine(const Graph& graph, const ref::TensorMap& feeds,
                                      OptLevel level,
                                      const std::vector<cpu::ActivationLayout>& layouts);

}  // namespace kiln::tools
