// The gRPC services (kiln.v1.InferenceService, kiln.v1.ModelService). This is the only place
// where absl::Status becomes a gRPC status. Handlers run on gRPC's sync thread pool; each
// Predict blocks its thread on the batcher's future, at most until the call's deadline.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>

#include "base/status.h"
#include "kiln/v1/inference.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "server/common/stall_watchdog.h"
#include "server/repository/upload.h"
#include "server/serving/model_registry.h"

namespace kiln::server {

// absl and gRPC share the canonical code numbering; the message passes through, cut at
// kMaxStatusMessageBytes.
inline constexpr size_t kMaxStatusMessageBytes = 2048;
grpc::Status ToGrpcStatus(const absl::Status& s);

// A kiln.v1 request's version field: versions are >= 1, and 0 (the proto default) means "not
// given". proto3 `optional` would say it better, but Debian's python3-grpc-tools (protoc 3.12)
// rejects it.
inline std::optional<int64_t> VersionOf(int64_t v) {
  return v != 0 ? std::optional<int64_t>(v) : std::nullopt;
}

// The call's deadline on the batcher's clock (gRPC deadlines are wall-clock); none when the
// client set none.
std::optional<Clock::time_point> DeadlineOf(const grpc::ServerContext& ctx);

class InferenceServiceImpl final : public v1::InferenceService::Service {
 public:
  explicit InferenceServiceImpl(ModelRegistry& registry) : registry_(registry) {}
  grpc::Status Predict(grpc::ServerContext* ctx, const v1::PredictRequest* req,
                       v1::PredictResponse* resp) override;
  grpc::Status BatchPredict(grpc::ServerContext* ctx, const v1::BatchPredictRequest* req,
                            v1::BatchPredictResponse* resp) override;

 private:
  ModelRegistry& registry_;  // outlives the service (owned by main)
};

struct ModelServiceOptions {
  std::string auth_token;  // empty: Load/Unload need no credentials
  UploadLimits uploads;
};

class ModelServiceImpl final : public v1::ModelService::Service {
 public:
  ModelServiceImpl(ModelRegistry& registry, ModelServiceOptions options)
      : registry_(registry),
        options_(std::move(options)),
        limiter_(options_.uploads),
        watchdog_(options_.uploads.stall_timeout) {}
  grpc::Status LoadModel(grpc::ServerContext* ctx, grpc::ServerReader<v1::LoadModelChunk>* reader,
                         v1::LoadModelResponse* resp) override;
  grpc::Status UnloadModel(grpc::ServerContext* ctx, const v1::UnloadModelRequest* req,
                           v1::UnloadModelResponse* resp) override;
  grpc::Status ListModels(grpc::ServerContext* ctx, const v1::ListModelsRequest* req,
                          v1::ListModelsResponse* resp) override;
  grpc::Status GetModel(grpc::ServerContext* ctx, const v1::GetModelRequest* req,
                        v1::ModelInfo* resp) override;

 private:
  absl::Status Authorize(const grpc::ServerContext& ctx) const;
  absl::StatusOr<UploadHead> Receive(grpc::ServerContext& ctx,
                                     grpc::ServerReader<v1::LoadModelChunk>& reader,
                                     UploadLimiter::Slot& slot, StagedModel& staged);
  ModelRegistry& registry_;
  const ModelServiceOptions options_;
  UploadLimiter limiter_;
  StallWatchdog watchdog_;
};

// The bearer-token rule (server/common/auth.h) on a call's `authorization` metadata.
absl::Status AuthorizeCall(const grpc::ServerContext& ctx, const std::string& token);

// The ModelInfo of one loaded version; `full` adds the compile report.
void FillModelInfo(const ModelVersion& mv, bool full, v1::ModelInfo* out);

}  // namespace kiln::server
