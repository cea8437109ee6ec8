#include "tools/kiln/cuda_run.h"

#include "tools/kiln/static_graph.h"

namespace kiln::tools {

absl::StatusOr<CpuRun> RunOnCudaEngine(const Graph& graph, const ref::TensorMap& feeds, OptLevel level,
                                       const cuda::CudaEngineOptions& options) {
  CpuRun run;
  ASSIGN_OR_RETURN(run.compiled, CompileStatic(graph, feeds, level, "cuda"));
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Engine> engine, cuda::BuildCudaEngine(run.compiled, options));
  std::vector<Tensor> ins;
  for (const auto& spec : engine->inputs()) {
    auto it = feeds.find(spec.name);
    if (it == feeds.end()) return absl::InvalidArgumentError("no feed for input " + spec.name);
    ins.push_back(it->second);
  }
  LayoutRun& r = run.runs.emplace_back();
  r.layout = "cuda";
  RETURN_IF_ERROR(engine->Run(ins, r.outputs));
  return run;
}

}  // namespace kiln::tools
