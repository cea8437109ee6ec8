#include "server/serving/kserve_model.h"

#include <map>
#include <set>

#include "absl/strings/str_join.h"
#include "base/memory_budget.h"
#include "server/common/echo.h"

#ifndef KILN_VERSION
#define KILN_VERSION "unknown"
#endif

namespace kiln::server::kserve {
namespace {

// Kiln serves ONNX through its own compiler, not through a Triton backend: the platform
// says so (clients only compare it with values such as "ensemble").
constexpr char kPlatform[] = "kiln_onnx";

// The version a metadata call describes: the one named, else the newest READY one. Its
// signature is known only once READY.
absl::StatusOr<std::shared_ptr<ModelVersion>> ReadyVersion(const ModelRegistry& registry,
                                                           const std::string& name,
                                                           const std::string& version) {
  ASSIGN_OR_RETURN(const std::optional<int64_t> v, ParseVersion(version));
  return FindReady(registry, name, v);
}

// Dims as the model configuration writes them: without the batch dim when the model batches.
std::vector<int64_t> ConfigDims(const runtime::TensorSpec& spec, bool batchable) {
  std::vector<int64_t> dims = spec.shape;
  if (batchable && !dims.empty()) dims.erase(dims.begin());
  return dims;
}

void FillInstanceGroup(const server::ModelConfig& c, const std::string& name,
                       inference::ModelConfig& out) {
  inference::ModelInstanceGroup* g = out.add_instance_group();
  g->set_name(absl::StrCat(name, "_0"));
  g->set_count(c.instances);
  if (c.device.rfind("cuda:", 0) == 0) {
    g->set_kind(inference::ModelInstanceGroup::KIND_GPU);
    g->add_gpus(std::atoi(c.device.c_str() + 5));
  } else {
    g->set_kind(inference::ModelInstanceGroup::KIND_CPU);
  }
}

void FillParameters(const server::ModelConfig& c, inference::ModelConfig& out) {
  auto& p = *out.mutable_parameters();
  p["device"].set_string_value(c.device);
  p["opt_level"].set_string_value(absl::StrCat("O", static_cast<int>(c.opt_level)));
  p["cpu_layout"].set_string_value(c.cpu_layout);
  p["disabled_passes"].set_string_value(absl::StrJoin(c.disabled_passes, ","));
}

// A dynamic model's dims (ModelSignature::dim_ranges), as the model config's `parameters`
// (the tensors show -1; the v2 protocol has no field for a range): "sequence=128 [1, 512]",
// the size warm-up checked at and the sizes served.
void FillDynamicDims(const ModelSignature& sig, inference::ModelConfig& out) {
  std::vector<std::string> dims;
  for (const auto& [name, range] : sig.dim_ranges) {
    auto typical = sig.default_dims.find(name);
    dims.push_back(absl::StrCat(name, "=", typical != sig.default_dims.end() ? typical->second : 0,
                                " [", range.first, ", ", range.second, "]"));
  }
  if (!dims.empty())
    (*out.mutable_parameters())["dynamic_dims"].set_string_value(absl::StrJoin(dims, "; "));
}

void FillDuration(const ModelStats::Count& c, inference::StatisticDuration* out) {
  out->set_count(c.count);
  out->set_ns(c.ns);
}

void FillStatistics(const ModelVersion& mv, inference::ModelStatistics* out) {
  out->set_name(mv.name());
  out->set_version(absl::StrCat(mv.version()));
  const ModelStats::Snapshot s = mv.stats() ? mv.stats()->Read() : ModelStats::Snapshot{};
  out->set_last_inference(s.last_inference_ms);
  out->set_inference_count(s.inference_count);
  out->set_execution_count(s.execution_count);
  inference::InferStatistics* is = out->mutable_inference_stats();
  FillDuration(s.success, is->mutable_success());
  FillDuration(s.fail, is->mutable_fail());
  FillDuration(s.queue, is->mutable_queue());
  FillDuration(s.compute, is->mutable_compute_infer());
  // Kiln's engine time covers moving inputs and outputs too; these parts count runs only.
  FillDuration({s.execution_count, 0}, is->mutable_compute_input());
  FillDuration({s.execution_count, 0}, is->mutable_compute_output());
  for (const auto& [bucket, c] : s.batches) {
    inference::InferBatchStatistics* b = out->add_batch_stats();
    b->set_batch_size(static_cast<uint64_t>(bucket));
    FillDuration(c, b->mutable_compute_infer());
    FillDuration({c.count, 0}, b->mutable_compute_input());
    FillDuration({c.count, 0}, b->mutable_compute_output());
  }
}

// Outputs the protocol cannot carry (float8, int4, ...) are refused before anything runs.
absl::Status CheckExpressible(const ModelSignature& sig, const std::vector<size_t>& selected) {
  for (size_t i : selected) {
    if (DataTypeName(sig.outputs[i].dtype).empty()) {
      return absl::UnimplementedError(absl::StrCat(
          "output '", sig.outputs[i].name, "' has dtype ", DTypeName(sig.outputs[i].dtype),
          ", which the KServe v2 protocol cannot carry; use kiln.v1 Predict"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

inference::ServerMetadataResponse GetServerMetadata() {
  inference::ServerMetadataResponse r;
  r.set_name("kiln");
  r.set_version(KILN_VERSION);
  for (const char* e : {"classification", "model_configuration", "model_repository", "statistics",
                        "binary_tensor_data"}) {
    r.add_extensions(e);
  }
  return r;
}

absl::Status CheckParameter(const std::string& key, const std::string& where) {
  if (key.rfind("shared_memory_", 0) == 0) {
    return absl::UnimplementedError(absl::StrCat(
        where, ": parameter '", key,
        "': kilnd does not implement the shared-memory extension; send the tensor's data in "
        "the request"));
  }
  if (key == "sequence_id" || key == "sequence_start" || key == "sequence_end") {
    return absl::UnimplementedError(
        absl::StrCat(where, ": parameter '", key, "': kilnd does not implement sequence batching"));
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<PendingInfer> StartInferImpl(const ModelRegistry& registry, InferCall call,
                                            std::optional<Clock::time_point> deadline,
                                            RequestRecorder& record) {
  ASSIGN_OR_RETURN(const std::optional<int64_t> version, ParseVersion(call.version));
  PendingInfer p;
  ASSIGN_OR_RETURN(p.mv, FindReady(registry, call.model, version));
  record.Reached(p.mv);
  const ModelSignature& sig = p.mv->built().signature;
  std::vector<std::string> names;
  for (const RequestedOutput& o : call.outputs) {
    if (o.classification < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", EchoName(o.name), "': classification must be >= 0"));
    }
    names.push_back(o.name);
  }
  ASSIGN_OR_RETURN(p.selected, SelectNamedOutputs(sig, names));
  RETURN_IF_ERROR(CheckExpressible(sig, p.selected));
  p.requested = std::move(call.outputs);
  if (p.requested.empty()) {
    for (size_t i : p.selected) p.requested.push_back({sig.outputs[i].name, 0, std::nullopt});
  }
  ASSIGN_OR_RETURN(std::vector<NamedTensor> named, call.decode(sig));
  ASSIGN_OR_RETURN(ValidatedInputs in, ValidateNamedInputs(sig, std::move(named)));
  record.SetRows(in.rows);
  RETURN_IF_ERROR(
      CheckResponseBound(sig, p.selected, in.rows, registry.limits().max_response_bytes));
  p.wait.deadline = deadline;
  RETURN_IF_ERROR(CheckDeadline(deadline));
  ASSIGN_OR_RETURN(p.future, p.mv->Submit(std::move(in), deadline, p.wait.abandoned));
  p.id = std::move(call.id);
  p.binary_outputs = call.binary_outputs;
  p.max_response_bytes = registry.limits().max_response_bytes;
  return p;
}

absl::StatusOr<InferReply> FinishInferImpl(PendingInfer& p) {
  ASSIGN_OR_RETURN(std::vector<Tensor> outputs, Await(p.future, p.wait));
  RETURN_IF_ERROR(CheckResponseBytes(ResponseBytes(outputs, p.selected), p.max_response_bytes));
  const ModelSignature& sig = p.mv->built().signature;
  InferReply r;
  r.model = p.mv->name();
  r.version = absl::StrCat(p.mv->version());
  r.id = std::move(p.id);
  for (size_t j = 0; j < p.selected.size(); ++j) {
    const size_t i = p.selected[j];
    const RequestedOutput& want = p.requested[j];
    Output o;
    if (want.classification > 0) {
      ASSIGN_OR_RETURN(
          o, Classify(sig.outputs[i].name, outputs[i], want.classification, sig.batchable));
    } else {
      o = NumericOutput(sig.outputs[i].name, std::move(outputs[i]));
    }
    o.binary = want.binary.value_or(p.binary_outputs);
    r.outputs.push_back(std::move(o));
  }
  return r;
}

}  // namespace

// Decoded inputs and computed outputs are tensors charged to the process memory budget.
absl::StatusOr<PendingInfer> StartInfer(const ModelRegistry& registry, InferCall call,
                                        std::optional<Clock::time_point> deadline,
                                        RequestRecorder& record) {
  return WithinBudget(ProcessMemory(),
                      [&] { return StartInferImpl(registry, std::move(call), deadline, record); });
}

absl::StatusOr<InferReply> FinishInfer(PendingInfer& p) {
  return WithinBudget(ProcessMemory(), [&] { return FinishInferImpl(p); });
}

absl::StatusOr<bool> IsModelReady(const ModelRegistry& registry, const std::string& name,
                                  const std::string& version) {
  ASSIGN_OR_RETURN(const std::optional<int64_t> v, ParseVersion(version));
  auto mv = registry.Find(name, v);
  return mv.ok() && (*mv)->state() == ModelState::kReady;
}

absl::StatusOr<inference::ModelMetadataResponse> GetModelMetadata(const ModelRegistry& registry,
                                                                  const std::string& name,
                                                                  const std::string& version) {
  ASSIGN_OR_RETURN(auto mv, ReadyVersion(registry, name, version));
  inference::ModelMetadataResponse r;
  r.set_name(mv->name());
  for (const auto& other : registry.List()) {
    if (other->name() == name) r.add_versions(absl::StrCat(other->version()));
  }
  r.set_platform(kPlatform);
  const ModelSignature& sig = mv->built().signature;
  for (const auto& [specs, out] :
       {std::pair(&sig.inputs, r.mutable_inputs()), std::pair(&sig.outputs, r.mutable_outputs())}) {
    for (const runtime::TensorSpec& s : *specs) {
      auto* t = out->Add();
      t->set_name(s.name);
      t->set_datatype(std::string(DataTypeName(s.dtype)));
      for (int64_t d : s.shape) t->add_shape(d < 0 ? -1 : d);
    }
  }
  return r;
}

absl::StatusOr<inference::ModelConfig> GetModelConfig(const ModelRegistry& registry,
                                                      const std::string& name,
                                                      const std::string& version) {
  ASSIGN_OR_RETURN(auto mv, ReadyVersion(registry, name, version));
  const ModelSignature& sig = mv->built().signature;
  const server::ModelConfig& c = mv->config();
  inference::ModelConfig r;
  r.set_name(mv->name());
  r.set_platform(kPlatform);
  r.set_backend("kiln");
  r.set_default_model_filename("model.onnx");
  r.mutable_version_policy()->mutable_all();
  r.set_max_batch_size(sig.batchable ? static_cast<int32_t>(sig.max_batch_size) : 0);
  for (const runtime::TensorSpec& s : sig.inputs) {
    inference::ModelInput* in = r.add_input();
    in->set_name(s.name);
    in->set_data_type(ConfigDataType(s.dtype));
    for (int64_t d : ConfigDims(s, sig.batchable)) in->add_dims(d);
  }
  for (const runtime::TensorSpec& s : sig.outputs) {
    inference::ModelOutput* out = r.add_output();
    out->set_name(s.name);
    out->set_data_type(ConfigDataType(s.dtype));
    for (int64_t d : ConfigDims(s, sig.batchable)) out->add_dims(d);
  }
  FillInstanceGroup(c, mv->name(), r);
  if (sig.batchable) {
    inference::ModelDynamicBatching* b = r.mutable_dynamic_batching();
    for (int64_t bucket : mv->built().buckets)
      b->add_preferred_batch_size(static_cast<int32_t>(bucket));
    b->set_max_queue_delay_microseconds(static_cast<uint64_t>(c.max_queue_delay_us));
    b->set_preserve_ordering(true);  // the batcher is FIFO
    b->mutable_default_queue_policy()->set_max_queue_size(static_cast<uint32_t>(c.max_queue_size));
  }
  FillParameters(c, r);
  FillDynamicDims(sig, r);
  if (const auto& padding = mv->built().padding) {
    (*r.mutable_parameters())["shape_classes"].set_string_value(padding->ToString());
  }
  return r;
}

absl::StatusOr<inference::ModelStatisticsResponse> GetModelStatistics(const ModelRegistry& registry,
                                                                      const std::string& name,
                                                                      const std::string& version) {
  ASSIGN_OR_RETURN(const std::optional<int64_t> v, ParseVersion(version));
  inference::ModelStatisticsResponse r;
  if (!name.empty()) {
    RETURN_IF_ERROR(registry.Find(name, v).status());  // NOT_FOUND for an unknown model
  }
  for (const auto& mv : registry.List()) {
    if (!name.empty() && mv->name() != name) continue;
    if (v && mv->version() != *v) continue;
    FillStatistics(*mv, r.add_model_stats());
  }
  return r;
}

inference::RepositoryIndexResponse GetRepositoryIndex(ModelRegistry& registry, bool ready_only) {
  // name -> version -> entry; loaded versions first, then stored ones nothing loaded.
  std::map<std::string, std::map<int64_t, inference::RepositoryIndexResponse::ModelIndex>> all;
  for (const auto& mv : registry.List()) {
    auto& e = all[mv->name()][mv->version()];
    e.set_name(mv->name());
    e.set_version(absl::StrCat(mv->version()));
    switch (mv->state()) {
      case ModelState::kReady:
        e.set_state("READY");
        break;
      case ModelState::kLoading:
        e.set_state("LOADING");
        break;
      case ModelState::kFailed:
        e.set_state("UNAVAILABLE");
        break;
    }
    e.set_reason(mv->reason());
  }
  if (auto stored = registry.repository().Scan(); stored.ok()) {
    for (const RepositoryModel& m : *stored) {
      for (int64_t v : m.versions) {
        auto& versions = all[m.name];
        if (versions.count(v)) continue;
        auto& e = versions[v];
        e.set_name(m.name);
        e.set_version(absl::StrCat(v));
        e.set_state("UNAVAILABLE");
        e.set_reason("not loaded");
      }
    }
  }
  inference::RepositoryIndexResponse r;
  for (auto& [name, versions] : all) {
    for (auto& [v, e] : versions) {
      if (!ready_only || e.state() == "READY") *r.add_models() = std::move(e);
    }
  }
  return r;
}

}  // namespace kiln::server::kserve
