// inference.GRPCInferenceService: the KServe v2 protocol on kilnd's gRPC port, beside kiln.v1
// and over the same registry, batchers, limits and metrics (method label ModelInfer /
// ModelStreamInfer). A thin transport: requests are decoded here (raw_input_contents or typed
// contents) and answered from server/serving/kserve_model.h; absl::Status becomes a gRPC status
// here (ToGrpcStatus). Extensions Kiln lacks (shared memory, trace and log settings) answer
// UNIMPLEMENTED with a message saying so.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "kserve/grpc_service.grpc.pb.h"
#include "server/serving/model_registry.h"

namespace kiln::server {

class KServeGrpcService final : public inference::GRPCInferenceService::Service {
 public:
  // `auth_token`: RepositoryModelLoad/Unload need it as a bearer token (empty: open).
  KServeGrpcService(ModelRegistry& registry, std::string auth_token)
      : registry_(registry), auth_token_(std::move(auth_token)) {}

  grpc::Status ServerLive(grpc::ServerContext*, const inference::ServerLiveRequest*,
                          inference::ServerLiveResponse* resp) override;
  grpc::Status ServerReady(grpc::ServerContext*, const inference::ServerReadyRequest*,
                           inference::ServerReadyResponse* resp) override;
  grpc::Status ModelReady(grpc::ServerContext*, const inference::ModelReadyRequest* req,
                          inference::ModelReadyResponse* resp) override;
  grpc::Status ServerMetadata(grpc::ServerContext*, const inference::ServerMetadataRequest*,
                              inference::ServerMetadataResponse* resp) override;
  grpc::Status ModelMetadata(grpc::ServerContext*, const inference::ModelMetadataRequest* req,
                             inference::ModelMetadataResponse* resp) override;
  grpc::Status ModelInfer(grpc::ServerContext* ctx, const inference::ModelInferRequest* req,
                          inference::ModelInferResponse* resp) override;
  grpc::Status ModelStreamInfer(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<inference::ModelStreamInferResponse, inference::ModelInferRequest>*
          stream) override;
  grpc::Status ModelConfig(grpc::ServerContext*, const inference::ModelConfigRequest* req,
                           inference::ModelConfigResponse* resp) override;
  grpc::Status ModelStatistics(grpc::ServerContext*, const inference::ModelStatisticsRequest* req,
                               inference::ModelStatisticsResponse* resp) override;
  grpc::Status RepositoryIndex(grpc::ServerContext*, const inference::RepositoryIndexRequest* req,
                               inference::RepositoryIndexResponse* resp) override;
  grpc::Status RepositoryModelLoad(grpc::ServerContext* ctx,
                                   const inference::RepositoryModelLoadRequest* req,
                                   inference::RepositoryModelLoadResponse*) override;
  grpc::Status RepositoryModelUnload(grpc::ServerContext* ctx,
                                     const inference::RepositoryModelUnloadRequest* req,
                                     inference::RepositoryModelUnloadResponse*) override;

  grpc::Status SystemSharedMemoryStatus(grpc::ServerContext*,
                                        const inference::SystemSharedMemoryStatusRequest*,
                                        inference::SystemSharedMemoryStatusResponse*) override;
  grpc::Status SystemSharedMemoryRegister(grpc::ServerContext*,
                                          const inference::SystemSharedMemoryRegisterRequest*,
                                          inference::SystemSharedMemoryRegisterResponse*) override;
  grpc::Status SystemSharedMemoryUnregister(
      grpc::ServerContext*, const inference::SystemSharedMemoryUnregisterRequest*,
      inference::SystemSharedMemoryUnregisterResponse*) override;
  grpc::Status CudaSharedMemoryStatus(grpc::ServerContext*,
                                      const inference::CudaSharedMemoryStatusRequest*,
                                      inference::CudaSharedMemoryStatusResponse*) override;
  grpc::Status CudaSharedMemoryRegister(grpc::ServerContext*,
                                        const inference::CudaSharedMemoryRegisterRequest*,
                                        inference::CudaSharedMemoryRegisterResponse*) override;
  grpc::Status CudaSharedMemoryUnregister(grpc::ServerContext*,
                                          const inference::CudaSharedMemoryUnregisterRequest*,
                                          inference::CudaSharedMemoryUnregisterResponse*) override;
  grpc::Status TraceSetting(grpc::ServerContext*, const inference::TraceSettingRequest*,
                            inference::TraceSettingResponse*) override;
  grpc::Status LogSettings(grpc::ServerContext*, const inference::LogSettingsRequest*,
                           inference::LogSettingsResponse*) override;

 private:
  ModelRegistry& registry_;  // outlives the service (owned by main)
  const std::string auth_token_;
};

}  // namespace kiln::server
