#include "runtime/reference/reference_engine.h"

#include <utility>

#include "compiler/pipeline.h"
#include "ops/interpreter.h"
#include "runtime/device.h"

namespace kiln::runtime {
namespace {

absl::StatusOr<TensorSpec> SpecOf(const Value& v) {
  if (!v.shape || !IsStatic(*v.shape)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reference engine: '", v.name, "' has no static shape (compile for one batch size)"));
  }
  return TensorSpec{v.name, v.dtype, StaticDims(*v.shape)};
}

class ReferenceEngine final : public Engine {
 public:
  explicit ReferenceEngine(std::unique_ptr<Graph> graph) : graph_(std::move(graph)) {}

  absl::Status Init(const CompiledGraph* compiled) {
    for (const Value* v : graph_->inputs) {
      ASSIGN_OR_RETURN(TensorSpec s, SpecOf(*v));
      inputs_.push_back(std::move(s));
    }
    for (const Value* v : graph_->outputs) {
      ASSIGN_OR_RETURN(TensorSpec s, SpecOf(*v));
      outputs_.push_back(std::move(s));
    }
    info_.device = "reference";
    info_.batch = inputs_.empty() || inputs_[0].shape.empty() ? 1 : inputs_[0].shape[0];
    info_.total_ops = static_cast<int>(graph_->nodes().size());
    info_.fallback_ops = 0;  // every op is a reference op: nothing "falls back"
    if (compiled) info_.arena_bytes = compiled->report.arena_bytes;
    for (const auto& v : graph_->values()) {
      if (v->is_constant()) info_.weight_bytes += static_cast<int64_t>(v->constant->nbytes());
    }
    return absl::OkStatus();
  }

  const EngineInfo& info() const override { return info_; }
  const std::vector<TensorSpec>& inputs() const override { return inputs_; }
  const std::vector<TensorSpec>& outputs() const override { return outputs_; }

  absl::Status Run(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs) override {
    if (inputs.size() != inputs_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("reference engine: expected ",
                                                     inputs_.size(), " inputs, got ",
                                                     inputs.size()));
    }
    ref::TensorMap feed;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const TensorSpec& s = inputs_[i];
      if (inputs[i].dtype() != s.dtype || inputs[i].shape() != s.shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            "reference engine: input '", s.name, "' must be ", DTypeName(s.dtype),
            ShapeToString(s.shape), ", got ", DTypeName(inputs[i].dtype()),
            ShapeToString(inputs[i].shape())));
      }
      feed.emplace(s.name, inputs[i]);
    }
    ASSIGN_OR_RETURN(ref::TensorMap got, ref::Run(*graph_, feed));
    outputs.resize(outputs_.size());
    for (size_t i = 0; i < outputs_.size(); ++i) {
      outputs[i] = std::move(got.at(outputs_[i].name));
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Graph> graph_;
  EngineInfo info_;
  std::vector<TensorSpec> inputs_, outputs_;
};

absl::StatusOr<std::unique_ptr<Engine>> Build(std::unique_ptr<Graph> graph,
                                              const CompiledGraph* compiled) {
  auto engine = std::make_unique<ReferenceEngine>(std::move(graph));
  RETURN_IF_ERROR(engine->Init(compiled));
  return std::unique_ptr<Engine>(std::move(engine));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> BuildReferenceEngine(const CompiledGraph& compiled) {
  if (!compiled.graph) return absl::InvalidArgumentError("reference engine: no graph");
  return Build(compiled.graph->Clone(), &compiled);
}

absl::StatusOr<std::unique_ptr<Engine>> BuildReferenceEngine(const Graph& graph) {
  return Build(graph.Clone(), nullptr);
}

namespace {

class Reference final : public Backend {
 public:
  const char* name() const override { return "reference"; }
  bool Serves(const std::string& device) const override {
    const std::optional<Device> d = ParseDevice(device);
    return d && d->family == DeviceFamily::kReference;
  }
  std::string Fingerprint(const std::string& device) const override { return device; }
  std::set<std::string> PassesOff() const override { return PassesOffFor("reference"); }
  absl::StatusOr<std::unique_ptr<Engine>> Build(const std::string&, const CompiledGraph& compiled,
                                                const BuildOptions&) const override {
    return BuildReferenceEngine(compiled);
  }
};

}  // namespace

const Backend& ReferenceBackend() {
  static const Reference backend;
  return backend;
}

}  // namespace kiln::runtime
