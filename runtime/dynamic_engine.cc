// The two-region engine (dynamic_engine.h): the backend's planned engine for the static region,
// the reference interpreter for the data-dependent rest.
#include "runtime/dynamic_engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "compiler/plan/memory_plan.h"
#include "ops/interpreter.h"

namespace kiln::runtime {
namespace {

bool HasStaticLayout(const Value* v) {
  return v->shape && IsStatic(*v->shape) && DTypeSize(v->dtype) > 0;
}

std::string OpName(const Node& n) {
  return n.domain.empty() ? n.op_type : n.domain + "." + n.op_type;
}

// How the graph splits. A node is static when its outputs have static shapes and a dense
// dtype and it reads only graph inputs, constants and static values: nodes after a
// data-dependent one stay dynamic even when their own shapes are static, because their
// inputs exist only per run.
struct Partition {
  std::vector<bool> is_static;              // per node, schedule order
  std::vector<std::string> boundary;        // static values the dynamic region reads
  std::vector<std::string> static_outputs;  // boundary + graph outputs made statically
  int dynamic_ops = 0;
  std::set<std::string> dynamic_types;
};

Partition Split(const Graph& graph) {
  Partition p;
  std::unordered_set<const Value*> avail(graph.inputs.begin(), graph.inputs.end());
  std::unordered_set<const Value*> made_static;
  const auto& nodes = graph.nodes();
  p.is_static.assign(nodes.size(), false);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = *nodes[i];
    bool ok = true;
    for (const Value* in : n.inputs) ok = ok && (!in || in->is_constant() || avail.count(in));
    for (const Value* out : n.outputs) ok = ok && (!out || HasStaticLayout(out));
    if (!ok) {
      ++p.dynamic_ops;
      p.dynamic_types.insert(OpName(n));
      continue;
    }
    p.is_static[i] = true;
    for (const Value* out : n.outputs) {
      if (!out) continue;
      avail.insert(out);
      made_static.insert(out);
    }
  }
  std::unordered_set<std::string> seen;
  auto add = [&](const Value* v, std::vector<std::string>& to) {
    if (v && made_static.count(v) && seen.insert(v->name).second) to.push_back(v->name);
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (p.is_static[i]) continue;
    for (const Value* in : nodes[i]->inputs) add(in, p.boundary);
  }
  p.static_outputs = p.boundary;
  for (const Value* v : graph.outputs) add(v, p.static_outputs);
  return p;
}

// Keeps the nodes with keep[i] (schedule order) and drops the rest; values the dropped
// nodes produced lose their producer (the caller makes them inputs or prunes them).
void KeepNodes(Graph& g, const std::vector<bool>& keep) {
  auto& nodes = g.mutable_nodes();
  std::vector<std::unique_ptr<Node>> kept;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (keep[i]) {
      kept.push_back(std::move(nodes[i]));
      continue;
    }
    for (Value* out : nodes[i]->outputs) {
      if (out && out->producer == nodes[i].get()) out->producer = nullptr;
    }
  }
  nodes = std::move(kept);
}

absl::StatusOr<CompiledGraph> StaticPart(const Graph& graph, const Partition& p) {
  CompiledGraph c;
  c.graph = graph.Clone();
  KeepNodes(*c.graph, p.is_static);
  c.graph->outputs.clear();
  for (const std::string& name : p.static_outputs)
    c.graph->outputs.push_back(c.graph->FindValue(name));
  c.graph->PruneUnusedValues();
  ASSIGN_OR_RETURN(c.plan, plan::PlanMemory(*c.graph));
  return c;
}

// The dynamic region as a graph of its own: the original inputs plus the boundary values
// in, the graph outputs it produces out.
std::unique_ptr<Graph> DynamicPart(const Graph& graph, const Partition& p) {
  std::unique_ptr<Graph> g = graph.Clone();
  std::vector<bool> keep(p.is_static.size());
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = !p.is_static[i];
  KeepNodes(*g, keep);
  for (const std::string& name : p.boundary) g->inputs.push_back(g->FindValue(name));
  std::vector<Value*> outs;
  for (Value* v : g->outputs) {
    if (v->producer && std::find(outs.begin(), outs.end(), v) == outs.end()) outs.push_back(v);
  }
  g->outputs = std::move(outs);
  g->PruneUnusedValues();
  return g;
}

// Where a graph output's tensor comes from on each run.
struct OutputSource {
  enum Kind { kStatic, kDynamic, kInput, kConstant } kind = kDynamic;
  size_t index = 0;  // kStatic: static engine output; kInput: graph input
  std::string name;  // kDynamic: the dynamic region's output
  Tensor constant;   // kConstant
};

TensorSpec SpecOf(const Value& v) {
  TensorSpec s{v.name, v.dtype, {}};
  if (v.shape) {
    for (const Dim& d : *v.shape) s.shape.push_back(d.known() ? d.value : -1);
  }
  return s;
}

// Writes `src` into `dst` in place when the caller's tensor already fits (steady state for
// outputs whose size does not change), else a deep copy: the source may be the static
// engine's buffer, rewritten by the next run.
void CopyOut(const Tensor& src, Tensor& dst) {
  if (dst.dtype() == src.dtype() && dst.shape() == src.shape() && DTypeSize(src.dtype()) > 0) {
    if (src.nbytes() > 0 && dst.raw() != src.raw()) {
      std::memcpy(dst.raw_mutable(), src.raw(), src.nbytes());
    }
    return;
  }
  dst = src.Clone();
}

class DynamicEngine : public Engine {
 public:
  // `device`: the device string of the backend building the static region ("cpu", "cuda:0").
  explicit DynamicEngine(std::string device)
      : device_(std::move(device)), where_(device_ + " engine: ") {}
  absl::Status Build(const CompiledGraph& compiled, const StaticEngineBuilder& build_static,
                     const char* layout);
  const EngineInfo& info() const override { return info_; }
  const std::vector<TensorSpec>& inputs() const override { return input_specs_; }
  const std::vector<TensorSpec>& outputs() const override { return output_specs_; }
  absl::Status Run(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) override;

 private:
  absl::Status BuildStatic(const Graph& graph, const Partition& p,
                           const StaticEngineBuilder& build_static);
  absl::Status BindOutputs(const Graph& graph);
  void FillInfo(const Partition& p, const char* layout);

  const std::string device_, where_;
  std::unique_ptr<Engine> static_;     // null when no static value is needed
  std::vector<size_t> static_inputs_;  // per static engine input: our input index
  std::vector<Tensor> static_outs_;    // its outputs, reused between runs
  std::unique_ptr<Graph> dynamic_;
  std::vector<OutputSource> sources_;
  EngineInfo info_;
  std::vector<TensorSpec> input_specs_, output_specs_;
};

absl::Status DynamicEngine::Build(const CompiledGraph& compiled,
                                  const StaticEngineBuilder& build_static, const char* layout) {
  const auto t0 = std::chrono::steady_clock::now();
  const Graph& graph = *compiled.graph;
  for (const Value* in : graph.inputs) {
    if (!HasStaticLayout(in)) {
      return absl::InvalidArgumentError(where_ + "input '" + in->name +
                                        "' has no static shape (compile for one batch size)");
    }
    input_specs_.push_back(SpecOf(*in));
  }
  const Partition p = Split(graph);
  RETURN_IF_ERROR(BuildStatic(graph, p, build_static));
  dynamic_ = DynamicPart(graph, p);
  RETURN_IF_ERROR(BindOutputs(graph));
  FillInfo(p, layout);
  info_.build_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return absl::OkStatus();
}

absl::Status DynamicEngine::BuildStatic(const Graph& graph, const Partition& p,
                                        const StaticEngineBuilder& build_static) {
  if (p.static_outputs.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(CompiledGraph part, StaticPart(graph, p));
  ASSIGN_OR_RETURN(static_, build_static(part));
  for (const TensorSpec& spec : static_->inputs()) {
    size_t i = 0;
    while (i < input_specs_.size() && input_specs_[i].name != spec.name) ++i;
    if (i == input_specs_.size()) {
      return absl::InternalError(where_ + "static region input '" + spec.name + "' unknown");
    }
    static_inputs_.push_back(i);
  }
  return absl::OkStatus();
}

absl::Status DynamicEngine::BindOutputs(const Graph& graph) {
  for (const Value* v : graph.outputs) {
    OutputSource src;
    src.name = v->name;
    auto named = [&](const std::vector<TensorSpec>& specs) {
      size_t i = 0;
      while (i < specs.size() && specs[i].name != v->name) ++i;
      return i;
    };
    if (v->is_constant()) {
      src.kind = OutputSource::kConstant;
      src.constant = *v->constant;
    } else if (const size_t i = named(input_specs_); i < input_specs_.size()) {
      src.kind = OutputSource::kInput;
      src.index = i;
    } else if (static_ && named(static_->outputs()) < static_->outputs().size()) {
      src.kind = OutputSource::kStatic;
      src.index = named(static_->outputs());
    } else if (!dynamic_->FindValue(v->name) ||
               !dynamic_->IsGraphOutput(dynamic_->FindValue(v->name))) {
      return absl::InternalError(where_ + "output '" + v->name + "' is in neither region");
    }
    sources_.push_back(std::move(src));
    output_specs_.push_back(SpecOf(*v));
  }
  return absl::OkStatus();
}

void DynamicEngine::FillInfo(const Partition& p, const char* layout) {
  if (static_) {
    info_ = static_->info();
  } else {
    info_.device = device_;
    info_.layout = layout;
    info_.batch =
        input_specs_.empty() || input_specs_[0].shape.empty() ? 1 : input_specs_[0].shape[0];
  }
  info_.total_ops += p.dynamic_ops;
  info_.fallback_ops += p.dynamic_ops;
  std::set<std::string> types(info_.fallback_op_types.begin(), info_.fallback_op_types.end());
  types.insert(p.dynamic_types.begin(), p.dynamic_types.end());
  info_.fallback_op_types.assign(types.begin(), types.end());
}

absl::Status DynamicEngine::Run(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) {
  RETURN_IF_ERROR(CheckInputs(input_specs_, inputs));
  ref::TensorMap known;  // every value the dynamic region may read, sharing buffers
  for (size_t i = 0; i < inputs.size(); ++i) known[input_specs_[i].name] = inputs[i];
  if (static_) {
    std::vector<Tensor> ins;
    for (size_t i : static_inputs_) ins.push_back(inputs[i]);
    RETURN_IF_ERROR(static_->Run(ins, static_outs_));
    for (size_t k = 0; k < static_outs_.size(); ++k) {
      known[static_->outputs()[k].name] = static_outs_[k];
    }
  }
  ref::TensorMap feed;
  for (const Value* v : dynamic_->inputs) feed[v->name] = known.at(v->name);
  ASSIGN_OR_RETURN(ref::TensorMap results, ref::Run(*dynamic_, feed));
  outputs.resize(sources_.size());
  for (size_t k = 0; k < sources_.size(); ++k) {
    const OutputSource& s = sources_[k];
    switch (s.kind) {
      case OutputSource::kStatic:
        CopyOut(static_outs_[s.index], outputs[k]);
        break;
      case OutputSource::kInput:
        CopyOut(inputs[s.index], outputs[k]);
        break;
      case OutputSource::kConstant:
        CopyOut(s.constant, outputs[k]);
        break;
      case OutputSource::kDynamic:
        CopyOut(results.at(s.name), outputs[k]);
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> BuildDynamicEngine(const CompiledGraph& compiled,
                                                           const StaticEngineBuilder& build_static,
                                                           const std::string& device,
                                                           const char* layout) {
  if (!compiled.graph) return absl::InvalidArgumentError(device + " engine: no graph");
  auto engine = std::make_unique<DynamicEngine>(device);
  RETURN_IF_ERROR(engine->Build(compiled, build_static, layout));
  return std::unique_ptr<Engine>(std::move(engine));
}

bool HasDynamicRegion(const Engine& engine) {
  return dynamic_cast<const DynamicEngine*>(&engine) != nullptr;
}

}  // namespace kiln::runtime
