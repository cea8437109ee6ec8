#include "tools/kiln/engine_run.h"

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "runtime/backend.h"
#include "runtime/cpu/tune.h"
#include "tools/kiln/static_graph.h"

namespace kiln::tools {

namespace {

// dynamic: compile and build a graph with data-dependent shapes (a static region planned
// as usual, the rest on the reference per run).
absl::StatusOr<EngineRun> BuildAndRun(const runtime::Backend& backend, const Graph& graph,
                                      const ref::TensorMap& feeds, const EngineRunOptions& o,
                                      bool dynamic = false) {
  CompileOptions co;
  co.pipeline.level = o.level;
  co.batch = BatchOf(graph);
  co.allow_dynamic_shapes = dynamic;
  co.pipeline.disabled = backend.PassesOff();
  EngineRun run;
  ASSIGN_OR_RETURN(run.compiled, CompileGraph(graph, co));
  const bool per_layout = std::string(backend.name()) == "cpu";
  for (const std::string& layout : o.layouts) {
    if (!run.runs.empty() && (!per_layout || !cpu::HasLayoutChoice(*run.compiled.graph))) break;
    runtime::BuildOptions bo;
    bo.layout = per_layout ? layout : "tune";
    bo.dynamic_shapes = dynamic;
    bo.tf32 = o.tf32;
    ASSIGN_OR_RETURN(std::unique_ptr<runtime::Engine> engine,
                     backend.Build(o.device, run.compiled, bo));
    LayoutRun& r = run.runs.emplace_back();
    r.layout = per_layout ? layout : backend.name();
    RETURN_IF_ERROR(RunOnFeeds(*engine, feeds, r.outputs));
  }
  return run;
}

}  // namespace

absl::StatusOr<EngineRun> RunOnEngine(const Graph& graph, const ref::TensorMap& feeds,
                                      const EngineRunOptions& options) {
  ASSIGN_OR_RETURN(const runtime::Backend* backend, runtime::FindBackend(options.device));
  const std::string engine = std::string(backend->name()) + " engine: ";
  absl::StatusOr<EngineRun> run = BuildAndRun(*backend, graph, feeds, options);
  if (run.ok() || !NeedsStaticShapes(run.status())) {
    if (!run.ok() && absl::StrContains(run.status().message(), "no dense size")) {
      return absl::UnimplementedError(engine + std::string(run.status().message()));
    }
    return run;
  }
  // Shapes that depend on input values: retry with the shape-like inputs bound.
  std::unique_ptr<Graph> frozen = FreezeShapeInputs(graph, feeds);
  run = BuildAndRun(*backend, *frozen, feeds, options);
  // Still data-dependent (NonZero, NonMaxSuppression, a Loop's trip count): the engine with
  // a dynamic region, over the graph as given so the shape inputs flow through it per run.
  // Tried last so shapes a feed can fix keep the fully planned engine.
  if (!run.ok() && NeedsStaticShapes(run.status())) {
    run = BuildAndRun(*backend, graph, feeds, options, /*dynamic=*/true);
  }
  if (!run.ok() && NeedsStaticShapes(run.status())) {
    return absl::UnimplementedError(
        engine + "data-dependent shapes: " + std::string(run.status().message()));
  }
  return run;
}

}  // namespace kiln::tools
