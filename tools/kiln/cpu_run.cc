#include "tools/kiln/cpu_run.h"

#include <algorithm>
#include <string>

#include "absl/strings/match.h"

#include "runtime/cpu/cpu_engine.h"
#include "runtime/cpu/tune.h"
#include "tools/kiln/static_graph.h"

namespace kiln::tools {

namespace {

// dynamic: compile and build a graph with data-dependent shapes (a static region planned
// as usual, the rest on the reference per run: runtime/cpu/dynamic_engine.h).
absl::StatusOr<CpuRun> BuildAndRun(const Graph& graph, const ref::TensorMap& feeds,
                                   OptLevel level,
                                   const std::vector<cpu::ActivationLayout>& layouts,
                                   bool dynamic = false) {
  CompileOptions co;
  co.pipeline.level = level;
  co.batch = BatchOf(graph);
  co.allow_dynamic_shapes = dynamic;
  co.pipeline.disabled = PassesOffHere("cpu");
  CpuRun run;
  ASSIGN_OR_RETURN(run.compiled, CompileGraph(graph, co));
  for (const cpu::ActivationLayout layout : layouts) {
    if (!run.runs.empty() && !cpu::HasLayoutChoice(*run.compiled.graph)) break;
    cpu::CpuEngineOptions eo;
    eo.layout = layout;
    eo.dynamic_shapes = dynamic;
    ASSIGN_OR_RETURN(std::unique_ptr<runtime::Engine> engine,
                     cpu::BuildCpuEngine(run.compiled, eo));
    LayoutRun& r = run.runs.emplace_back();
    r.layout = cpu::ActivationLayoutName(layout);
    RETURN_IF_ERROR(RunOnFeeds(*engine, feeds, r.outputs));
  }
  return run;
}

}  // namespace

absl::StatusOr<CpuRun> RunOnCpuEngine(const Graph& graph, const ref::TensorMap& feeds,
                                      OptLevel level,
                                      const std::vector<cpu::ActivationLayout>& layouts) {
  absl::StatusOr<CpuRun> run = BuildAndRun(graph, feeds, level, layouts);
  if (run.ok() || !NeedsStaticShapes(run.status())) {
    if (!run.ok() && absl::StrContains(run.status().message(), "no dense size")) {
      return absl::UnimplementedError("cpu engine: " + std::string(run.status().message()));
    }
    return run;
  }
  // Shapes that depend on input values: retry with the shape-like inputs bound.
  std::unique_ptr<Graph> frozen = FreezeShapeInputs(graph, feeds);
  run = BuildAndRun(*frozen, feeds, level, layouts);
  // Still data-dependent (NonZero, NonMaxSuppression, a Loop's trip count): the engine with
  // a dynamic region, over the graph as given so the shape inputs flow through it per run.
  // Tried last so shapes a feed can fix keep the fully planned engine.
  if (!run.ok() && NeedsStaticShapes(run.status())) {
    run = BuildAndRun(graph, feeds, level, layouts, /*dynamic=*/true);
  }
  if (!run.ok() && NeedsStaticShapes(run.status())) {
    return absl::UnimplementedError("cpu engine: data-dependent shapes: " +
                                    std::string(run.status().message()));
  }
  return run;
}

}  // namespace kiln::tools
