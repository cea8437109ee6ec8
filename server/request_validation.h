// Checks a request's inputs against the model signature before anything is queued: every
// input present, no unknown names, dtypes and shapes right, byte counts right, one batch
// size across inputs. Every failure is INVALID_ARGUMENT with a message that says exactly
// what was expected and what came.
#pragma once

#include <string>
#include <vector>

#include <google/protobuf/map.h>
#include <google/protobuf/repeated_field.h>

#include "base/status.h"
#include "compiler/ir/tensor.h"
#include "kiln/v1/tensor.pb.h"
#include "server/model_signature.h"

namespace kiln::server {

struct ValidatedInputs {
  std::vector<Tensor> tensors;  // in signature order
  int64_t rows = 1;             // the batch dim shared by every input
};

using ProtoTensorMap = google::protobuf::Map<std::string, v1::Tensor>;

// Moves each input's raw bytes out of `inputs` into the tensors (no copy); typed fields are
// converted. `inputs` is the request's own map, read by nothing afterwards.
absl::StatusOr<ValidatedInputs> ValidateInputs(const ModelSignature& sig, ProtoTensorMap* inputs);
// Indices into sig.outputs to return; every name in `filter` must exist (empty: all).
absl::StatusOr<std::vector<size_t>> SelectOutputs(
    const ModelSignature& sig, const google::protobuf::RepeatedPtrField<std::string>& filter);

}  // namespace kiln::server
