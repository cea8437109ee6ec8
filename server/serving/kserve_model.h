// The KServe v2 protocol's view of kilnd, shared by its two transports (server/grpc/grpc_kserve.h
// for gRPC, server/http/http_kserve.h for REST): inference on decoded tensors, and the metadata,
// configuration, statistics and repository index of the models, built as the protocol's
// messages (the REST side writes the same messages as JSON). Everything here speaks
// absl::Status; the transports map it to their codes.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "kserve/grpc_service.pb.h"
#include "server/serving/inference.h"
#include "server/serving/kserve_tensor.h"
#include "server/serving/model_registry.h"

namespace kiln::server::kserve {

// What ServerMetadata says (name "kiln", the build's version, the extensions below).
inference::ServerMetadataResponse GetServerMetadata();

// UNIMPLEMENTED for request, input or output parameters of extensions Kiln lacks (shared
// memory, sequence batching); OK for every other name (unknown parameters are ignored, as
// the protocol allows).
absl::Status CheckParameter(const std::string& key, const std::string& where);

// One requested output: its name and the classification count (0: the tensor itself).
struct RequestedOutput {
  std::string name;
  int64_t classification = 0;
  std::optional<bool> binary;  // REST's binary_data (gRPC always answers raw bytes)
};

// An inference request once its transport has read it; `decode` turns its inputs into
// tensors, and runs only after the model version is found (so an unknown model is
// NOT_FOUND, whatever the inputs), with its signature (CheckDeclaredInput before any data).
struct InferCall {
  std::string model;
  std::string version;
  std::string id;
  std::vector<RequestedOutput> outputs;  // empty: every output, as tensors
  bool binary_outputs = false;           // REST's binary_data_output: outputs' default
  std::function<absl::StatusOr<std::vector<NamedTensor>>(const ModelSignature&)> decode;
};

struct InferReply {
  std::string model;
  std::string version;
  std::string id;
  std::vector<Output> outputs;
};

// A request queued on its model's batcher, not yet answered (what ModelStreamInfer keeps
// while it reads the next requests of the stream).
struct PendingInfer {
  std::shared_ptr<ModelVersion> mv;
  std::string id;
  std::vector<size_t> selected;            // indices into the signature's outputs
  std::vector<RequestedOutput> requested;  // parallel to `selected`
  bool binary_outputs = false;
  std::future<Batcher::Result> future;
  RequestWait wait;                // its deadline; `abandoned` tells the batch when no one waits
  int64_t max_response_bytes = 0;  // the server's limit (ServingLimits)
};

// Finds the version, decodes, validates and queues; `record` learns the version and rows.
absl::StatusOr<PendingInfer> StartInfer(const ModelRegistry& registry, InferCall call,
                                        std::optional<Clock::time_point> deadline,
                                        RequestRecorder& record);
// Waits for the rows (until the deadline StartInfer was given) and builds the outputs
// (classification applied).
absl::StatusOr<InferReply> FinishInfer(PendingInfer& pending);

// ModelReady: OK(true) when the named version (the newest READY one without a version) is
// READY; OK(false) when it is loaded but not READY or not loaded at all.
absl::StatusOr<bool> IsModelReady(const ModelRegistry& registry, const std::string& name,
                                  const std::string& version);
absl::StatusOr<inference::ModelMetadataResponse> GetModelMetadata(const ModelRegistry& registry,
                                                                  const std::string& name,
                                                                  const std::string& version);
absl::StatusOr<inference::ModelConfig> GetModelConfig(const ModelRegistry& registry,
                                                      const std::string& name,
                                                      const std::string& version);
// `name` empty: every loaded version of every model; `version` empty: every loaded version.
absl::StatusOr<inference::ModelStatisticsResponse> GetModelStatistics(const ModelRegistry& registry,
                                                                      const std::string& name,
                                                                      const std::string& version);
// Loaded versions with their state, and models stored in the repository but not loaded
// (state UNAVAILABLE, reason "not loaded"); `ready_only` keeps the READY ones.
inference::RepositoryIndexResponse GetRepositoryIndex(ModelRegistry& registry, bool ready_only);

}  // namespace kiln::server::kserve
