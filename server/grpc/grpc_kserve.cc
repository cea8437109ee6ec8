#include "server/grpc/grpc_kserve.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "server/common/echo.h"
#include "server/grpc/grpc_services.h"
#include "server/serving/kserve_model.h"
#include "server/serving/readiness.h"

namespace kiln::server {
namespace {

using inference::ModelInferRequest;

// Requests of one stream queued or running at once; past this the reader stops reading, so
// a client that never reads its responses is held back by gRPC's flow control instead of
// growing the server's memory.
constexpr size_t kMaxStreamInFlight = 64;

// The synchronous API hands the request over as const, but it is this call's own message,
// read by nothing after the handler: raw inputs move out of it instead of being copied (see
// kiln.v1's Predict).
ModelInferRequest* Mutable(const ModelInferRequest* req) {
  return const_cast<ModelInferRequest*>(req);
}

absl::StatusOr<std::vector<NamedTensor>> DecodeInputs(ModelInferRequest* req,
                                                      const ModelSignature& sig) {
  const bool raw = req->raw_input_contents_size() > 0;
  if (raw && req->raw_input_contents_size() != req->inputs_size()) {
    return absl::InvalidArgumentError(absl::StrCat("raw_input_contents has ",
                                                   req->raw_input_contents_size(), " entries for ",
                                                   req->inputs_size(), " inputs"));
  }
  std::vector<NamedTensor> out;
  for (int i = 0; i < req->inputs_size(); ++i) {
    const ModelInferRequest::InferInputTensor& in = req->inputs(i);
    const std::string what = absl::StrCat("input '", EchoName(in.name()), "'");
    for (const auto& [key, value] : in.parameters()) {
      RETURN_IF_ERROR(kserve::CheckParameter(key, what));
    }
    ASSIGN_OR_RETURN(const DType dtype, kserve::ParseDataType(in.datatype(), what));
    std::vector<int64_t> shape(in.shape().begin(), in.shape().end());
    RETURN_IF_ERROR(CheckDeclaredInput(sig, in.name(), dtype, shape));
    absl::StatusOr<Tensor> t;
    if (raw) {
      if (in.has_contents() && kserve::HasContents(in.contents())) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": both contents and raw_input_contents are set"));
      }
      auto owner = std::make_shared<std::string>(std::move(*req->mutable_raw_input_contents(i)));
      t = kserve::FromRawBytes(dtype, std::move(shape), owner, *owner, what);
    } else {
      t = kserve::FromContents(dtype, std::move(shape), in.contents(), what);
    }
    if (!t.ok()) return t.status();
    out.push_back({in.name(), std::move(*t)});
  }
  return out;
}

absl::StatusOr<kserve::RequestedOutput> OutputOf(
    const ModelInferRequest::InferRequestedOutputTensor& o) {
  kserve::RequestedOutput r;
  r.name = o.name();
  const std::string what = absl::StrCat("output '", EchoName(o.name()), "'");
  for (const auto& [key, value] : o.parameters()) {
    if (key == "classification") {
      if (value.parameter_choice_case() != inference::InferParameter::kInt64Param) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": the classification parameter must be an int64_param"));
      }
      r.classification = value.int64_param();
    } else if (key != "binary_data") {  // gRPC outputs are raw bytes anyway
      RETURN_IF_ERROR(kserve::CheckParameter(key, what));
    }
  }
  return r;
}

// The transport-neutral call; inputs are decoded (from `req`) once the model is found.
absl::StatusOr<kserve::InferCall> CallOf(ModelInferRequest* req) {
  for (const auto& [key, value] : req->parameters()) {
    RETURN_IF_ERROR(kserve::CheckParameter(key, "request"));
  }
  kserve::InferCall call;
  call.model = req->model_name();
  call.version = req->model_version();
  call.id = req->id();
  for (const auto& o : req->outputs()) {
    ASSIGN_OR_RETURN(kserve::RequestedOutput r, OutputOf(o));
    call.outputs.push_back(std::move(r));
  }
  call.decode = [req](const ModelSignature& sig) { return DecodeInputs(req, sig); };
  return call;
}

void FillResponse(const kserve::InferReply& r, inference::ModelInferResponse* resp) {
  resp->set_model_name(r.model);
  resp->set_model_version(r.version);
  resp->set_id(r.id);
  for (const kserve::Output& o : r.outputs) {
    inference::ModelInferResponse::InferOutputTensor* t = resp->add_outputs();
    t->set_name(o.name);
    t->set_datatype(o.datatype);
    for (int64_t d : o.shape) t->add_shape(d);
    std::string* bytes = resp->add_raw_output_contents();
    bytes->reserve(kserve::RawByteSize(o));
    kserve::AppendRawBytes(o, bytes);
  }
}

// One streamed request, from its read to its response.
struct StreamEntry {
  std::unique_ptr<RequestRecorder> record;
  std::string model, id;
  absl::StatusOr<kserve::PendingInfer> pending;
};

// The stream's requests in arrival order, between the reading handler and the writer
// thread; Push blocks while kMaxStreamInFlight wait.
class StreamQueue {
 public:
  void Push(StreamEntry e) {
    std::unique_lock<std::mutex> lk(mu_);
    room_.wait(lk, [this] { return entries_.size() < kMaxStreamInFlight; });
    entries_.push_back(std::move(e));
    ready_.notify_one();
  }
  // The next entry; false once closed and drained.
  bool Pop(StreamEntry& out) {
    std::unique_lock<std::mutex> lk(mu_);
    ready_.wait(lk, [this] { return closed_ || !entries_.empty(); });
    if (entries_.empty()) return false;
    out = std::move(entries_.front());
    entries_.pop_front();
    room_.notify_one();
    return true;
  }
  void Close() {
    std::lock_guard<std::mutex> lk(mu_);
    closed_ = true;
    ready_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable ready_, room_;
  std::deque<StreamEntry> entries_;  // guarded by mu_
  bool closed_ = false;              // guarded by mu_
};

inference::ModelStreamInferResponse Answer(StreamEntry& e) {
  inference::ModelStreamInferResponse out;
  absl::Status s = e.pending.status();
  if (s.ok()) {
    auto reply = kserve::FinishInfer(*e.pending);
    s = reply.status();
    if (s.ok()) FillResponse(*reply, out.mutable_infer_response());
  }
  s = e.record->Finish(e.model, s);
  if (!s.ok()) {
    // The stream itself stays OK: the error belongs to this request, which the id names.
    out.set_error_message(ToGrpcStatus(s).error_message());
    out.mutable_infer_response()->set_model_name(e.model);
    out.mutable_infer_response()->set_id(e.id);
  }
  return out;
}

grpc::Status Unimplemented(const char* what) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      absl::StrCat("kilnd does not implement ", what));
}

}  // namespace

grpc::Status KServeGrpcService::ServerLive(grpc::ServerContext*,
                                           const inference::ServerLiveRequest*,
                                           inference::ServerLiveResponse* resp) {
  resp->set_live(true);
  return grpc::Status::OK;
}

grpc::Status KServeGrpcService::ServerReady(grpc::ServerContext*,
                                            const inference::ServerReadyRequest*,
                                            inference::ServerReadyResponse* resp) {
  resp->set_ready(CheckReadiness(registry_).ready);
  return grpc::Status::OK;
}

grpc::Status KServeGrpcService::ModelReady(grpc::ServerContext*,
                                           const inference::ModelReadyRequest* req,
                                           inference::ModelReadyResponse* resp) {
  auto ready = kserve::IsModelReady(registry_, req->name(), req->version());
  if (!ready.ok()) return ToGrpcStatus(ready.status());
  resp->set_ready(*ready);
  return grpc::Status::OK;
}

grpc::Status KServeGrpcService::ServerMetadata(grpc::ServerContext*,
                                               const inference::ServerMetadataRequest*,
                                               inference::ServerMetadataResponse* resp) {
  *resp = kserve::GetServerMetadata();
  return grpc::Status::OK;
}

grpc::Status KServeGrpcService::ModelMetadata(grpc::ServerContext*,
                                              const inference::ModelMetadataRequest* req,
                                              inference::ModelMetadataResponse* resp) {
  auto r = kserve::GetModelMetadata(registry_, req->name(), req->version());
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status KServeGrpcService::ModelInfer(grpc::ServerContext* ctx, const ModelInferRequest* req,
                                           inference::ModelInferResponse* resp) {
  RequestRecorder record(registry_, "ModelInfer");
  auto run = [&]() -> absl::Status {
    const auto deadline = DeadlineOf(*ctx);
    ASSIGN_OR_RETURN(kserve::InferCall call, CallOf(Mutable(req)));
    ASSIGN_OR_RETURN(auto pending,
                     kserve::StartInfer(registry_, std::move(call), deadline, record));
    ASSIGN_OR_RETURN(const kserve::InferReply reply, kserve::FinishInfer(pending));
    FillResponse(reply, resp);
    return absl::OkStatus();
  };
  return ToGrpcStatus(record.Finish(req->model_name(), run()));
}

// Requests are read and queued on the batchers as they arrive (so a client that pipelines
// requests on one stream gets them batched together); a writer thread answers them in order.
grpc::Status KServeGrpcService::ModelStreamInfer(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<inference::ModelStreamInferResponse, ModelInferRequest>* stream) {
  const auto deadline = DeadlineOf(*ctx);
  StreamQueue queue;
  std::thread writer([&] {
    bool open = true;  // once a write fails the client is gone: answers are only recorded
    StreamEntry e;
    while (queue.Pop(e)) {
      const inference::ModelStreamInferResponse out = Answer(e);
      if (open) open = stream->Write(out);
    }
  });
  while (true) {
    ModelInferRequest req;
    if (!stream->Read(&req)) break;
    StreamEntry e;
    e.record = std::make_unique<RequestRecorder>(registry_, "ModelStreamInfer");
    e.model = req.model_name();
    e.id = req.id();
    auto call = CallOf(&req);
    e.pending = call.ok() ? kserve::StartInfer(registry_, std::move(*call), deadline, *e.record)
                          : absl::StatusOr<kserve::PendingInfer>(call.status());
    queue.Push(std::move(e));
  }
  queue.Close();
  writer.join();
  return grpc::Status::OK;
}

grpc::Status KServeGrpcService::ModelConfig(grpc::ServerContext*,
                                            const inference::ModelConfigRequest* req,
                                            inference::ModelConfigResponse* resp) {
  auto r = kserve::GetModelConfig(registry_, req->name(), req->version());
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp->mutable_config() = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status KServeGrpcService::ModelStatistics(grpc::ServerContext*,
                                                const inference::ModelStatisticsRequest* req,
                                                inference::ModelStatisticsResponse* resp) {
  auto r = kserve::GetModelStatistics(registry_, req->name(), req->version());
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status KServeGrpcService::RepositoryIndex(grpc::ServerContext*,
                                                const inference::RepositoryIndexRequest* req,
                                                inference::RepositoryIndexResponse* resp) {
  *resp = kserve::GetRepositoryIndex(registry_, req->ready());
  return grpc::Status::OK;
}

grpc::Status KServeGrpcService::RepositoryModelLoad(
    grpc::ServerContext* ctx, const inference::RepositoryModelLoadRequest* req,
    inference::RepositoryModelLoadResponse*) {
  auto run = [&]() -> absl::Status {
    RETURN_IF_ERROR(AuthorizeCall(*ctx, auth_token_));
    for (const auto& [key, value] : req->parameters()) {
      if (key == "config" || key.rfind("file:", 0) == 0) {
        return absl::UnimplementedError(
            absl::StrCat("parameter '", EchoName(key),
                         "': kilnd loads models from its repository only; "
                         "send a model with kiln.v1.ModelService/LoadModel"));
      }
    }
    return registry_.LoadFromRepository(req->model_name());
  };
  return ToGrpcStatus(run());
}

grpc::Status KServeGrpcService::RepositoryModelUnload(
    grpc::ServerContext* ctx, const inference::RepositoryModelUnloadRequest* req,
    inference::RepositoryModelUnloadResponse*) {
  auto run = [&]() -> absl::Status {
    RETURN_IF_ERROR(AuthorizeCall(*ctx, auth_token_));
    RETURN_IF_ERROR(ValidateModelName(req->model_name()));
    return registry_.Unload(req->model_name(), std::nullopt, /*delete_files=*/false);
  };
  return ToGrpcStatus(run());
}

grpc::Status KServeGrpcService::SystemSharedMemoryStatus(
    grpc::ServerContext*, const inference::SystemSharedMemoryStatusRequest*,
    inference::SystemSharedMemoryStatusResponse*) {
  return Unimplemented("the system shared-memory extension");
}
grpc::Status KServeGrpcService::SystemSharedMemoryRegister(
    grpc::ServerContext*, const inference::SystemSharedMemoryRegisterRequest*,
    inference::SystemSharedMemoryRegisterResponse*) {
  return Unimplemented("the system shared-memory extension");
}
grpc::Status KServeGrpcService::SystemSharedMemoryUnregister(
    grpc::ServerContext*, const inference::SystemSharedMemoryUnregisterRequest*,
    inference::SystemSharedMemoryUnregisterResponse*) {
  return Unimplemented("the system shared-memory extension");
}
grpc::Status KServeGrpcService::CudaSharedMemoryStatus(
    grpc::ServerContext*, const inference::CudaSharedMemoryStatusRequest*,
    inference::CudaSharedMemoryStatusResponse*) {
  return Unimplemented("the CUDA shared-memory extension");
}
grpc::Status KServeGrpcService::CudaSharedMemoryRegister(
    grpc::ServerContext*, const inference::CudaSharedMemoryRegisterRequest*,
    inference::CudaSharedMemoryRegisterResponse*) {
  return Unimplemented("the CUDA shared-memory extension");
}
grpc::Status KServeGrpcService::CudaSharedMemoryUnregister(
    grpc::ServerContext*, const inference::CudaSharedMemoryUnregisterRequest*,
    inference::CudaSharedMemoryUnregisterResponse*) {
  return Unimplemented("the CUDA shared-memory extension");
}
grpc::Status KServeGrpcService::TraceSetting(grpc::ServerContext*,
                                             const inference::TraceSettingRequest*,
                                             inference::TraceSettingResponse*) {
  return Unimplemented("the trace extension (kilnd exports Prometheus metrics at /metrics)");
}
grpc::Status KServeGrpcService::LogSettings(grpc::ServerContext*,
                                            const inference::LogSettingsRequest*,
                                            inference::LogSettingsResponse*) {
  return Unimplemented("the logging extension (set log.level in the server config)");
}

}  // namespace kiln::server
