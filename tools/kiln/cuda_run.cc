#include "tools/kiln/cuda_run.h"

#include "tools/kiln/static_graph.h"

namespace kiln::tools {

absl::StatusOr<CpuRun> RunOnCudaEngine(const Graph& graph, const ref::TensorMap& feeds, OptLevel level,
                                       const cuda::CudaEngineOptions& options) {
  CpuRun run;
  ASSIGN_OR_RETURN(run.compiled, CompileStatic(graph, feeds, level, "cuda"));
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Engine> engine,
                   cuda::BuildCudaEngine(run.compiled, options));
  LayoutRun& r = run.runs.emplace_back();
  r.layout = "cuda";
  RETURN_IF_ERROR(RunOnFeeds(*engine, feeds, r.outputs));
  return run;
}

}  // namespace kiln::tools
