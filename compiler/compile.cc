#include "compiler/compile.h"

#include <chrono>
#include <cstdio>
#include <sstream>

#include "base/elapsed.h"
#include "base/json.h"
#include "compiler/shape/infer.h"

namespace kiln {
namespace {

void WriteCounts(json::Writer& w, const std::map<std::string, int>& counts) {
  w.BeginObject();
  for (const auto& [op, n] : counts) w.Field(op, int64_t{n});
  w.EndObject();
}

}  // namespace

std::map<std::string, int> CountOpTypes(const Graph& graph) {
  std::map<std::string, int> counts;
  for (const auto& n : graph.nodes()) {
    ++counts[n->domain.empty() ? n->op_type : n->domain + "." + n->op_type];
  }
  return counts;
}

bool HasDynamicShapes(const Graph& graph) {
  for (const auto& n : graph.nodes()) {
    for (const Value* v : n->outputs) {
      if (v && (!v->shape || !IsStatic(*v->shape))) return true;
    }
  }
  return false;
}

absl::StatusOr<CompiledGraph> CompileGraph(const Graph& imported, const CompileOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  CompiledGraph out;
  out.graph = imported.Clone();
  out.report.ops_before = imported.nodes().size();
  out.report.op_types_before = CountOpTypes(imported);
  auto t_spec = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(shape::BindInputDims(*out.graph, options.dims));
  RETURN_IF_ERROR(shape::Specialize(*out.graph, options.batch));
  RETURN_IF_ERROR(shape::CheckStaticInputs(*out.graph, /*allow_symbolic_batch=*/false));
  out.report.specialize_ms = MsSince(t_spec);
  out.report.ops_specialized = out.graph->nodes().size();
  ASSIGN_OR_RETURN(out.report.passes, RunPipeline(*out.graph, options.pipeline));
  auto t_plan = std::chrono::steady_clock::now();
  if (!options.allow_dynamic_shapes || !HasDynamicShapes(*out.graph)) {
    ASSIGN_OR_RETURN(out.plan, plan::PlanMemory(*out.graph, options.plan));
  }
  out.report.plan_ms = MsSince(t_plan);
  out.report.ops_after = out.graph->nodes().size();
  out.report.op_types_after = CountOpTypes(*out.graph);
  out.report.arena_bytes = out.plan.arena_bytes;
  out.report.naive_bytes = out.plan.naive_bytes;
  out.report.lower_bound_bytes = out.plan.lower_bound_bytes;
  out.report.compile_ms = MsSince(t0);
  return out;
}

std::string CompileReport::ToText() const {
  std::ostringstream os;
  char line[160];
  os << "ops: " << ops_before << " -> " << ops_after << "\n";
  std::snprintf(line, sizeof line, "  %-34s %6s %9s\n", "pass", "ops", "ms");
  os << line;
  std::snprintf(line, sizeof line, "  %-34s %6zu %9.2f\n", "(specialize)", ops_specialized,
                specialize_ms);
  os << line;
  for (const auto& p : passes) {
    std::snprintf(line, sizeof line, "  %-34s %6zu %9.2f%s\n", p.name.c_str(), p.ops_after, p.ms,
                  p.changed ? "" : "  (no change)");
    os << line;
  }
  os << "op types after:";
  for (const auto& [op, n] : op_types_after) os << " " << op << "=" << n;
  os << "\nop types before:";
  for (const auto& [op, n] : op_types_before) os << " " << op << "=" << n;
  std::snprintf(line, sizeof line,
                "\nmemory: arena %.2f MiB, naive %.2f MiB (%.1fx), lower bound %.2f MiB "
                "(arena/bound %.3f)\n",
                arena_bytes / 1048576.0, naive_bytes / 1048576.0,
                arena_bytes ? static_cast<double>(naive_bytes) / arena_bytes : 0.0,
                lower_bound_bytes / 1048576.0,
                lower_bound_bytes ? static_cast<double>(arena_bytes) / lower_bound_bytes : 1.0);
  os << line;
  std::snprintf(line, sizeof line, "compile: %.1f ms (plan %.2f ms)\n", compile_ms, plan_ms);
  os << line;
  return os.str();
}

std::string CompileReport::ToJson() const {
  json::Writer w(json::NonFinite::kNull);
  w.BeginObject();
  w.Field("ops_before", static_cast<int64_t>(ops_before));
  w.Field("ops_specialized", static_cast<int64_t>(ops_specialized));
  w.Field("ops_after", static_cast<int64_t>(ops_after));
  w.Key("passes").BeginArray();
  for (const passes::PassStats& p : passes) {
    w.BeginObject().Field("name", p.name).Field("ops_after", static_cast<int64_t>(p.ops_after));
    w.Field("ms", p.ms).Field("changed", p.changed).EndObject();
  }
  w.EndArray();
  w.Key("op_types_before");
  WriteCounts(w, op_types_before);
  w.Key("op_types_after");
  WriteCounts(w, op_types_after);
  w.Key("memory").BeginObject().Field("arena_bytes", arena_bytes);
  w.Field("naive_bytes", naive_bytes).Field("lower_bound_bytes", lower_bound_bytes).EndObject();
  w.Field("compile_ms", compile_ms);
  return w.EndObject().Take();
}

}  // namespace kiln
