// Running a graph with static input shapes on an engine of any backend (runtime/backend.h),
// for `kiln check --backend cpu|cuda` and `kiln run --backend cpu|cuda`.
#pragma once

#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/pipeline.h"
#include "ops/interpreter.h"

namespace kiln::tools {

struct EngineRunOptions {
  std::string device = "cpu";  // any device runtime::FindBackend serves ("cpu", "cuda:1")
  OptLevel level = OptLevel::kO2;
  // The engines to build, by runtime::BuildOptions::layout: the CPU engine once per
  // activation layout ("primitive", "blocked"; the second and later only when the graph has
  // a layout choice, since otherwise the engines are the same); other backends build once.
  std::vector<std::string> layouts = {"primitive"};
  bool tf32 = false;  // cuda: TF32 tensor cores for float32
};

struct LayoutRun {
  std::string layout;           // the CPU engine's activation layout, or the backend's name
  std::vector<Tensor> outputs;  // one per graph output, in order
};

struct EngineRun {
  CompiledGraph compiled;  // its graph's outputs declare what the engines produced
  std::vector<LayoutRun> runs;
};

// Compiles `graph` (inputs already static; the batch is dim 0 of the first input) at
// `options.level` with the backend's passes kept off, builds its engines and runs each once
// on `feeds` (by input name). When shapes depend on input values, small integer inputs are
// bound as constants and the build is retried; still data-dependent, the engine is built
// with a dynamic region (runtime/dynamic_engine.h) where the backend has one.
// UNIMPLEMENTED when shapes stay data-dependent.
absl::StatusOr<EngineRun> RunOnEngine(const Graph& graph, const ref::TensorMap& feeds,
                                      const EngineRunOptions& options);

}  // namespace kiln::tools
