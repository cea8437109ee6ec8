// The compiler's front door: an imported graph in, an optimized graph for one batch size and
// its memory plan out, with the compile report (op counts per pass, per-op-type counts, arena
// bytes planned vs naive vs the liveness lower bound, time per pass).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/pipeline.h"
#include "compiler/plan/memory_plan.h"
#include "compiler/shape/bind_dims.h"
#include "ir/graph.h"

namespace kiln {

// Part of every engine cache key (server/model/engine_cache.h): bump it whenever a change to the
// importer, a pass, the pipeline or the memory planner can change what CompileGraph
// produces, so engines cached by an older compiler are rebuilt instead of trusted.
inline constexpr int kCompilerVersion = 1;

struct CompileOptions {
  int64_t batch = 1;
  // Values for symbolic input dims other than the batch (compiler/shape/bind_dims.h).
  shape::InputDims dims;
  PipelineOptions pipeline;
  plan::PlanOptions plan;
  // A graph whose shapes depend on input values (NonZero, NMS, a Reshape to a computed
  // shape) cannot be planned as a whole. With this set, such a graph compiles with an empty
  // plan instead of failing, and the backend plans what is static itself (the CPU engine's
  // dynamic region, runtime/dynamic_engine.h). Off by default: callers that need one
  // fixed arena (the server) keep the error.
  bool allow_dynamic_shapes = false;
};

struct CompileReport {
  size_t ops_before = 0;  // nodes of the imported graph
  size_t ops_specialized = 0;  // after binding the batch size (shape subgraphs folded)
  size_t ops_after = 0;
  std::map<std::string, int> op_types_before, op_types_after;
  std::vector<passes::PassStats> passes;
  int64_t arena_bytes = 0, naive_bytes = 0, lower_bound_bytes = 0;
  double specialize_ms = 0.0, plan_ms = 0.0, compile_ms = 0.0;

  std::string ToText() const;
  std::string ToJson() const;
};

struct CompiledGraph {
  std::unique_ptr<Graph> graph;
  plan::MemoryPlan plan;
  CompileReport report;
};

// Op type counts ("ai.kiln.FusedConv" for other domains).
std::map<std::string, int> CountOpTypes(const Graph& graph);

// True when some node output has no static shape (or unknown rank) after compilation.
bool HasDynamicShapes(const Graph& graph);

// Clones `imported`, binds the batch size, runs the pipeline and plans memory.
absl::StatusOr<CompiledGraph> CompileGraph(const Graph& imported, const CompileOptions& options);

}  // namespace kiln
