// Running a graph with static input shapes on the CUDA engine, for `kiln check --backend
// cuda` and `kiln run --backend cuda`. The result has the CPU engine's shape (cpu_run.h):
// the compiled graph and one run, named "cuda".
#pragma once

#include "compiler/pipeline.h"
#include "ops/interpreter.h"
#include "runtime/cuda/cuda_engine.h"
#include "tools/kiln/cpu_run.h"

namespace kiln::tools {

// Compiles `graph` (inputs already static) at `level` (shape-like inputs frozen when shapes
// depend on them, static_graph.h), builds the CUDA engine and runs it once on `feeds`.
absl::StatusOr<CpuRun> RunOnCudaEngine(const Graph& graph, const ref::TensorMap& feeds, OptLevel level,
                                       const cuda::CudaEngineOptions& options);

}  // namespace kiln::tools
