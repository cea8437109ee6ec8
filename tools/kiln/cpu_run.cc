#include "tools/kiln/cpu_run.h"

#include <algorithm>
#include <string>

#include "absl/strings/match.h"

#include "runtime/cpu/cpu_engine.h"
#include "runtime/cpu/tune.h"

namespace kiln::tools {

namespace {

// Shape-like inputs: small integer tensors (a Pad's pads, a Reshape's shape), and the float
// operands that size an output (Resize/Upsample scales, Range's bounds, OneHot's depth).
bool IsShapeLike(const Graph& g, const Value* v, const ref::TensorMap& feeds) {
  auto it = feeds.find(v->name);
  if (it == feeds.end() || it->second.numel() > 64) return false;
  if (IsIntegerDType(it->second.dtype())) return true;
  for (const Node* n : g.Consumers(v)) {
    if (!n->domain.empty()) continue;
    const bool sizing = n->op_type == "Range" ||
                        ((n->op_type == "Resize" || n->op_type == "Upsample") && n->input(0) != v) ||
                        (n->op_type == "OneHot" && n->input(1) == v);
    if (sizing) return true;
  }
  return false;
}

// A clone of `graph` whose shape-like inputs are constants with the fed values: the static
// engine then serves that one shape configuration, as an engine built for one input shape
// does (the data inputs stay inputs).
std::unique_ptr<Graph> FreezeShapeInputs(const Graph& graph, const ref::TensorMap& feeds) {
  std::unique_ptr<Graph> g = graph.Clone();
  std::vector<Value*> kept;
  for (Value* v : g->inputs) {
    if (IsShapeLike(*g, v, feeds)) {
      v->constant = feeds.at(v->name);
    } else {
      kept.push_back(v);
    }
  }
  g->inputs = kept;
  return g;
}

bool NeedsStaticShapes(const absl::Status& st) {
  return absl::StrContains(st.message(), "non-static shape") ||
         absl::StrContains(st.message(), "no static shape");
}

absl::StatusOr<CpuRun> BuildAndRun(const Graph& graph, const ref::TensorMap& feeds,
                                   OptLevel level,
                                   const std::vector<cpu::ActivationLayout>& layouts) {
  CompileOptions co;
  co.pipeline.level = level;
  // Specialize binds only symbolic dims, so with static inputs this just names the batch.
  if (!graph.inputs.empty() && graph.inputs[0]->shape && !graph.inputs[0]->shape->empty() &&
      (*graph.inputs[0]->shape)[0].known()) {
    co.batch = std::max<int64_t>(1, (*graph.inputs[0]->shape)[0].value);
  }
  CpuRun run;
  ASSIGN_OR_RETURN(run.compiled, CompileGraph(graph, co));
  for (const cpu::ActivationLayout layout : layouts) {
    if (!run.runs.empty() && !cpu::HasLayoutChoice(*run.compiled.graph)) break;
    cpu::CpuEngineOptions eo;
    eo.layout = layout;
    ASSIGN_OR_RETURN(std::unique_ptr<runtime::Engine> engine, cpu::BuildCpuEngine(run.compiled, eo));
    std::vector<Tensor> ins;
    for (const auto& spec : engine->inputs()) {
      auto it = feeds.find(spec.name);
      if (it == feeds.end()) return absl::InvalidArgumentError("no feed for input " + spec.name);
      ins.push_back(it->second);
    }
    LayoutRun& r = run.runs.emplace_back();
    r.layout = cpu::ActivationLayoutName(layout);
    RETURN_IF_ERROR(engine->Run(ins, r.outputs));
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
  if (!run.ok() && NeedsStaticShapes(run.status())) {
    return absl::UnimplementedError("cpu engine: data-dependent shapes: " +
                                    std::string(run.status().message()));
  }
  return run;
}

}  // namespace kiln::tools
