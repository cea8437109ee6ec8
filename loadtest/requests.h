// The requests kiln-load sends: read from a JSON file or made up from the model's metadata.
#pragma once

#include <memory>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "kiln/v1/inference.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "kserve/grpc_service.grpc.pb.h"
#include "loadtest/options.h"

namespace kiln::load {

// A small pool cycled through by the callers; built once so the load loop only sends.
struct RequestPool {
  std::vector<v1::PredictRequest> predict;
  std::vector<v1::BatchPredictRequest> batch;
  std::vector<inference::ModelInferRequest> v2;  // --protocol v2: `predict`, as ModelInfer
};

// A PredictRequest as the KServe v2 ModelInferRequest that carries the same tensors (raw
// bytes in raw_input_contents; typed fields are packed to bytes).
absl::StatusOr<inference::ModelInferRequest> ToModelInfer(const v1::PredictRequest& p);

// --data (a PredictRequest or BatchPredictRequest in JSON) or --model (random inputs per
// GetModel's declared inputs, batch 1), shaped for --call and --protocol.
// The model's info once READY (polling until options.wait_ready), UNAVAILABLE otherwise.
absl::StatusOr<v1::ModelInfo> GetReadyModel(const Options& options,
                                            const std::shared_ptr<grpc::Channel>& channel);

absl::StatusOr<RequestPool> BuildRequests(const Options& options,
                                          const std::shared_ptr<grpc::Channel>& channel);

}  // namespace kiln::load
