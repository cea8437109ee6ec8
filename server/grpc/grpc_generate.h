// kiln.v1.GenerationService: Generate (server streaming) and GenerateOnce over the version's
// generation loop (server/generate/generator.h).
#pragma once

#include <grpcpp/grpcpp.h>

#include "base/status.h"
#include "kiln/v1/generate.grpc.pb.h"
#include "server/generate/generator.h"
#include "server/serving/model_registry.h"

namespace kiln::server {

// The request's parameters; max_tokens, top_p and repetition_penalty at 0 keep
// GenerateParams' defaults (16, 1, 1). The sampling values are validated by the generator.
generate::GenerateParams ParamsFromProto(const v1::GenerateRequest& req);

class GenerationServiceImpl final : public v1::GenerationService::Service {
 public:
  explicit GenerationServiceImpl(ModelRegistry& registry) : registry_(registry) {}
  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status GenerateOnce(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                            v1::GenerateResponse* resp) override;

 private:
  // Submits `req` (its text_input encoded by the model's tokenizer) and relays its chunks to
  // `emit`, each with the text its tokens add (nullopt without a tokenizer).
  absl::Status Run(
      grpc::ServerContext& ctx, const v1::GenerateRequest& req, const char* method,
      const std::function<bool(const std::string&, int64_t, const generate::StreamChunk&,
                               const std::optional<std::string>&)>& emit);
  ModelRegistry& registry_;  // outlives the service (owned by main)
};

}  // namespace kiln::server
