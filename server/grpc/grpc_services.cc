#include "server/grpc/grpc_services.h"

#include "base/memory_budget.h"
#include "server/serving/inference.h"
#include "server/serving/request_validation.h"
#include "server/serving/tensor_codec.h"

namespace kiln::server {
namespace {

void FillOutputs(const ModelSignature& sig, const std::vector<size_t>& selected,
                 const std::vector<Tensor>& outputs, bool typed,
                 google::protobuf::Map<std::string, v1::Tensor>* out) {
  for (size_t i : selected) EncodeTensor(outputs[i], typed, &(*out)[sig.outputs[i].name]);
}

// The synchronous API hands the request over as const, yet it is this call's own message:
// gRPC destroys it after the handler returns and nothing reads it before. Moving the input
// bytes out of it saves a copy of every input (602 KB for one 224x224 image).
ProtoTensorMap* MutableInputs(const v1::PredictRequest* req) {
  return const_cast<v1::PredictRequest*>(req)->mutable_inputs();
}
ProtoTensorMap* MutableInputs(const v1::BatchPredictRequest* req, int sample) {
  return const_cast<v1::BatchPredictRequest*>(req)->mutable_samples(sample)->mutable_inputs();
}

// The request's deadline, and its client's cancel seen while it waits.
RequestWait WaitOf(grpc::ServerContext& ctx) {
  RequestWait w;
  w.deadline = DeadlineOf(ctx);
  w.client_gone = [&ctx] { return ctx.IsCancelled(); };
  return w;
}

}  // namespace

std::optional<Clock::time_point> DeadlineOf(const grpc::ServerContext& ctx) {
  const auto wall = ctx.deadline();
  if (wall == std::chrono::system_clock::time_point::max()) return std::nullopt;
  const auto left = wall - std::chrono::system_clock::now();
  if (left > std::chrono::hours(24 * 365)) return std::nullopt;
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(left);
}

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  // The message travels in a response header: past the client's metadata limit (8 KB by
  // default) the client would see RESOURCE_EXHAUSTED instead of this status. Client text in
  // messages is bounded where it is quoted (EchoName); this bounds everything else.
  std::string message(s.message().substr(0, kMaxStatusMessageBytes));
  if (s.message().size() > kMaxStatusMessageBytes) message += "...";
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::move(message));
}

grpc::Status InferenceServiceImpl::Predict(grpc::ServerContext* ctx, const v1::PredictRequest* req,
                                           v1::PredictResponse* resp) {
  RequestRecorder record(registry_, "Predict");
  auto run = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto mv, FindReady(registry_, req->model(), VersionOf(req->version())));
    record.Reached(mv);
    const ModelSignature& sig = mv->built().signature;
    ASSIGN_OR_RETURN(std::vector<size_t> selected, SelectOutputs(sig, req->output_filter()));
    ASSIGN_OR_RETURN(ValidatedInputs in, ValidateInputs(sig, MutableInputs(req)));
    record.SetRows(in.rows);
    const int64_t limit = registry_.limits().max_response_bytes;
    RETURN_IF_ERROR(CheckResponseBound(sig, selected, in.rows, limit));
    ASSIGN_OR_RETURN(std::vector<Tensor> outputs, RunOn(*mv, std::move(in), WaitOf(*ctx)));
    RETURN_IF_ERROR(CheckResponseBytes(ResponseBytes(outputs, selected), limit));
    resp->set_model(mv->name());
    resp->set_version(mv->version());
    FillOutputs(sig, selected, outputs, req->typed_outputs(), resp->mutable_outputs());
    return absl::OkStatus();
  };
  // Decoded inputs and computed outputs are charged to the process memory budget.
  return ToGrpcStatus(record.Finish(req->model(), WithinBudget(ProcessMemory(), run)));
}

grpc::Status InferenceServiceImpl::BatchPredict(grpc::ServerContext* ctx,
                                                const v1::BatchPredictRequest* req,
                                                v1::BatchPredictResponse* resp) {
  RequestRecorder record(registry_, "BatchPredict");
  auto run = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto mv, FindReady(registry_, req->model(), VersionOf(req->version())));
    record.Reached(mv);
    const ModelSignature& sig = mv->built().signature;
    ASSIGN_OR_RETURN(std::vector<size_t> selected, SelectOutputs(sig, req->output_filter()));
    if (req->samples_size() == 0) return absl::InvalidArgumentError("no samples");
    std::vector<ValidatedInputs> all;
    int64_t rows = 0;
    for (int i = 0; i < req->samples_size(); ++i) {
      auto in = ValidateInputs(sig, MutableInputs(req, i));
      if (!in.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("sample ", i, ": ", in.status().message()));
      }
      rows += in->rows;
      all.push_back(std::move(*in));
    }
    record.SetRows(rows);
    // The samples' outputs travel in one message: their sum is what the limit bounds.
    const int64_t limit = registry_.limits().max_response_bytes;
    RETURN_IF_ERROR(CheckResponseBound(sig, selected, rows, limit));
    const RequestWait wait = WaitOf(*ctx);
    RETURN_IF_ERROR(CheckDeadline(wait.deadline));
    // Everything is queued before anything is awaited, so the samples batch together.
    std::vector<std::future<Batcher::Result>> futures;
    for (ValidatedInputs& in : all) {
      ASSIGN_OR_RETURN(auto f, mv->Submit(std::move(in), wait.deadline, wait.abandoned));
      futures.push_back(std::move(f));
    }
    // A failed sample abandons the rest: nothing else will be awaited.
    struct AbandonOnExit {
      const RequestWait& w;
      ~AbandonOnExit() { w.abandoned->store(true); }
    } abandon_rest{wait};
    resp->set_model(mv->name());
    resp->set_version(mv->version());
    int64_t bytes = 0;
    for (auto& f : futures) {
      ASSIGN_OR_RETURN(std::vector<Tensor> outputs, Await(f, wait));
      bytes += ResponseBytes(outputs, selected);
      RETURN_IF_ERROR(CheckResponseBytes(bytes, limit));
      FillOutputs(sig, selected, outputs, req->typed_outputs(),
                  resp->add_results()->mutable_outputs());
    }
    return absl::OkStatus();
  };
  // Decoded inputs and computed outputs are charged to the process memory budget.
  return ToGrpcStatus(record.Finish(req->model(), WithinBudget(ProcessMemory(), run)));
}

}  // namespace kiln::server
