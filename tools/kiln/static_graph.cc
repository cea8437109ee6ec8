#include "tools/kiln/static_graph.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "runtime/backend.h"

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

}  // namespace

bool NeedsStaticShapes(const absl::Status& st) {
  return absl::StrContains(st.message(), "non-static shape") ||
         absl::StrContains(st.message(), "no static shape");
}

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

int64_t BatchOf(const Graph& graph) {
  // Specialize binds only symbolic dims, so with static inputs this just names the batch.
  if (!graph.inputs.empty() && graph.inputs[0]->shape && !graph.inputs[0]->shape->empty() &&
      (*graph.inputs[0]->shape)[0].known()) {
    return std::max<int64_t>(1, (*graph.inputs[0]->shape)[0].value);
  }
  return 1;
}

std::set<std::string> PassesOffHere(const std::string& backend) {
  absl::StatusOr<const runtime::Backend*> b = runtime::FindBackend(backend);
  return b.ok() ? (*b)->PassesOff() : PassesOffFor(backend);
}

absl::StatusOr<CompiledGraph> CompileStatic(const Graph& graph, const ref::TensorMap& feeds,
                                            OptLevel level, const std::string& backend) {
  CompileOptions co;
  co.pipeline.level = level;
  co.pipeline.disabled = PassesOffHere(backend);
  co.batch = BatchOf(graph);
  absl::StatusOr<CompiledGraph> c = CompileGraph(graph, co);
  if (c.ok() || !NeedsStaticShapes(c.status())) return c;
  std::unique_ptr<Graph> frozen = FreezeShapeInputs(graph, feeds);
  co.batch = BatchOf(*frozen);
  c = CompileGraph(*frozen, co);
  if (!c.ok() && NeedsStaticShapes(c.status())) {
    return absl::UnimplementedError("data-dependent shapes: " + std::string(c.status().message()));
  }
  return c;
}

absl::Status RunOnFeeds(runtime::Engine& engine, const ref::TensorMap& feeds,
                        std::vector<Tensor>& outputs) {
  std::vector<Tensor> ins;
  for (const auto& spec : engine.inputs()) {
    auto it = feeds.find(spec.name);
    if (it == feeds.end()) return absl::InvalidArgumentError("no feed for input " + spec.name);
    ins.push_back(it->second);
  }
  return engine.Run(ins, outputs);
}

}  // namespace kiln::tools
