// kiln.v1.ModelService (declared in grpc_services.h).
#include "compiler/onnx/importer.h"
#include "server/grpc_services.h"

namespace kiln::server {
namespace {

// Versions are >= 1; 0 (the proto default) means "not given". proto3 `optional` would say
// it better, but Debian's python3-grpc-tools (protoc 3.12) rejects it.
std::optional<int64_t> VersionOf(int64_t v) { return v != 0 ? std::optional(v) : std::nullopt; }

v1::ModelState ProtoState(ModelState s) {
  switch (s) {
    case ModelState::kLoading: return v1::MODEL_STATE_LOADING;
    case ModelState::kReady: return v1::MODEL_STATE_READY;
    case ModelState::kFailed: return v1::MODEL_STATE_FAILED;
  }
  return v1::MODEL_STATE_UNKNOWN;
}

void FillTensorInfo(const runtime::TensorSpec& s, v1::TensorInfo* out) {
  out->set_name(s.name);
  out->set_dtype(static_cast<v1::DataType>(s.dtype));
  for (int64_t d : s.shape) out->add_shape(d);
}

void FillEngines(const ModelVersion& mv, v1::ModelInfo* out) {
  for (const auto& [batch, instances] : mv.built().engines) {
    const runtime::EngineInfo& info = instances.at(0)->info();
    v1::EngineSummary* e = out->add_engines();
    e->set_device(info.device);
    e->set_batch(batch);
    e->set_instances(static_cast<int32_t>(instances.size()));
    e->set_arena_bytes(info.arena_bytes);
    e->set_weight_bytes(info.weight_bytes);
    e->set_build_ms(info.build_ms);
    e->set_total_ops(info.total_ops);
    e->set_fallback_ops(info.fallback_ops);
    e->set_layout(info.layout);
    e->set_tune_ms(info.tune_ms);
    e->set_threads(info.threads);
    for (const std::string& t : info.fallback_op_types) e->add_fallback_op_types(t);
    for (const std::string& t : info.slow_ops) e->add_slow_ops(t);
    e->set_isa(info.isa);
  }
}

// Reads the whole upload: the first chunk carries the name (and optional version/config).
absl::Status ReadUpload(grpc::ServerReader<v1::LoadModelChunk>& reader, int64_t max_bytes,
                        v1::LoadModelChunk& head, std::string& bytes) {
  v1::LoadModelChunk chunk;
  bool first = true;
  while (reader.Read(&chunk)) {
    if (first) {
      head = chunk;
      head.clear_data();
      first = false;
    }
    if (static_cast<int64_t>(bytes.size() + chunk.data().size()) > max_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the model exceeds max_model_bytes (", max_bytes, ")"));
    }
    bytes += chunk.data();
  }
  if (first || bytes.empty()) return absl::InvalidArgumentError("the upload holds no model bytes");
  return absl::OkStatus();
}

}  // namespace

void FillModelInfo(const ModelVersion& mv, bool full, v1::ModelInfo* out) {
  out->set_name(mv.name());
  out->set_version(mv.version());
  out->set_state(ProtoState(mv.state()));
  out->set_reason(mv.reason());
  out->set_device(mv.config().device);
  if (mv.state() != ModelState::kReady) return;
  const BuiltModel& b = mv.built();
  for (const auto& s : b.signature.inputs) FillTensorInfo(s, out->add_inputs());
  for (const auto& s : b.signature.outputs) FillTensorInfo(s, out->add_outputs());
  out->set_max_batch_size(b.signature.max_batch_size);
  FillEngines(mv, out);
  v1::DifferentialCheck* c = out->mutable_check();
  c->set_ran(b.check.ran);
  c->set_ok(b.check.ok);
  c->set_max_abs_err(b.check.max_abs_err);
  c->set_max_rel_err(b.check.max_rel_err);
  c->set_message(b.check.message);
  for (const std::string& p : b.check.disabled_passes) c->add_disabled_passes(p);
  if (full) out->set_compile_report_json(b.report_json);
}

absl::Status ModelServiceImpl::Authorize(const grpc::ServerContext& ctx) const {
  if (options_.auth_token.empty()) return absl::OkStatus();
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return absl::UnauthenticatedError("this call needs 'authorization: Bearer <token>' metadata");
  }
  const std::string value(it->second.data(), it->second.size());
  if (value != "Bearer " + options_.auth_token) {
    return absl::PermissionDeniedError("the bearer token is not accepted");
  }
  return absl::OkStatus();
}

grpc::Status ModelServiceImpl::LoadModel(grpc::ServerContext* ctx,
                                         grpc::ServerReader<v1::LoadModelChunk>* reader,
                                         v1::LoadModelResponse* resp) {
  auto run = [&]() -> absl::Status {
    RETURN_IF_ERROR(Authorize(*ctx));
    v1::LoadModelChunk head;
    std::string bytes;
    RETURN_IF_ERROR(ReadUpload(*reader, options_.max_model_bytes, head, bytes));
    RETURN_IF_ERROR(ValidateModelName(head.name()));
    if (!head.config_yaml().empty()) {
      RETURN_IF_ERROR(ParseModelConfig(head.config_yaml(), ModelConfig{}, "config_yaml").status());
    }
    // Rejects garbage before it reaches the repository (where a restart would meet it again).
    RETURN_IF_ERROR(onnx_io::ImportModelBytes(bytes).status());
    const absl::StatusOr<RepositoryModel> before = registry_.repository().Find(head.name());
    ASSIGN_OR_RETURN(int64_t version,
                     registry_.repository().Store(head.name(),
                                                  VersionOf(head.version()),
                                                  bytes, head.config_yaml()));
    absl::Status loaded = registry_.LoadFromRepository(head.name(), version);
    if (!loaded.ok()) {
      // A rejected upload leaves the server as it was: no FAILED entry (it would hold /readyz
      // at 503 until unloaded), no files, and the model's previous config.yaml if it had one.
      (void)registry_.Unload(head.name(), version);
      if (!before.ok()) {
        (void)registry_.repository().Remove(head.name(), std::nullopt);
      } else {
        (void)registry_.repository().Remove(head.name(), version);
        if (!head.config_yaml().empty()) {
          (void)registry_.repository().SetConfig(head.name(), before->config_yaml);
        }
      }
      return loaded;
    }
    ASSIGN_OR_RETURN(auto mv, registry_.Find(head.name(), version));
    FillModelInfo(*mv, true, resp->mutable_model());
    return absl::OkStatus();
  };
  return ToGrpcStatus(run());
}

grpc::Status ModelServiceImpl::UnloadModel(grpc::ServerContext* ctx,
                                           const v1::UnloadModelRequest* req,
                                           v1::UnloadModelResponse*) {
  auto run = [&]() -> absl::Status {
    RETURN_IF_ERROR(Authorize(*ctx));
    RETURN_IF_ERROR(ValidateModelName(req->name()));
    const auto version = VersionOf(req->version());
    RETURN_IF_ERROR(registry_.Unload(req->name(), version));
    if (req->delete_from_repository()) RETURN_IF_ERROR(registry_.repository().Remove(req->name(), version));
    return absl::OkStatus();
  };
  return ToGrpcStatus(run());
}

grpc::Status ModelServiceImpl::ListModels(grpc::ServerContext*, const v1::ListModelsRequest*,
                                          v1::ListModelsResponse* resp) {
  for (const auto& mv : registry_.List()) FillModelInfo(*mv, false, resp->add_models());
  return grpc::Status::OK;
}

grpc::Status ModelServiceImpl::GetModel(grpc::ServerContext*, const v1::GetModelRequest* req,
                                        v1::ModelInfo* resp) {
  auto mv = registry_.Find(req->name(), VersionOf(req->version()));
  if (!mv.ok()) return ToGrpcStatus(mv.status());
  FillModelInfo(**mv, true, resp);
  return grpc::Status::OK;
}

}  // namespace kiln::server
