// Checks a request's inputs against the model signature before anything is queued: every
// input present, no unknown names, dtypes and shapes right, byte counts right, one batch
// size across inputs. Every failure is INVALID_ARGUMENT with a message that says exactly
// what was expected and what came.
#pragma once

#include <google/protobuf/map.h>
#include <google/protobuf/repeated_field.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/tensor.h"
#include "kiln/v1/tensor.pb.h"
#include "server/common/model_signature.h"

namespace kiln::server {

struct ValidatedInputs {
  std::vector<Tensor> tensors;  // in signature order
  int64_t rows = 1;             // the batch dim shared by every input
  // A dynamic model's size for every dynamic symbol (DynamicDimValues), computed once here
  // and carried to ModelVersion::Submit's routing; empty for static models.
  std::map<std::string, int64_t> dims;
};

using ProtoTensorMap = google::protobuf::Map<std::string, v1::Tensor>;

// Moves each input's raw bytes out of `inputs` into the tensors (no copy); typed fields are
// converted. `inputs` is the request's own map, read by nothing afterwards.
absl::StatusOr<ValidatedInputs> ValidateInputs(const ModelSignature& sig, ProtoTensorMap* inputs);
// A dynamic model's request (`inputs` in signature order, shapes already checked): its size
// for every dynamic symbol. INVALID_ARGUMENT when two inputs sharing a symbol disagree
// (ids of 17 tokens with a mask of 18). Empty for a static model.
absl::StatusOr<std::map<std::string, int64_t>> DynamicDimValues(const ModelSignature& sig,
                                                                const std::vector<Tensor>& inputs);
// Indices into sig.outputs to return; every name in `filter` must exist, each at most once
// (empty: all). The kiln.v1 form of SelectNamedOutputs.
absl::StatusOr<std::vector<size_t>> SelectOutputs(
    const ModelSignature& sig, const google::protobuf::RepeatedPtrField<std::string>& filter);

// Bytes of the selected outputs for `rows` rows as the signature gives them; nullopt when one
// of them has a size known only once it is computed (a data-dependent or dynamic dim).
std::optional<int64_t> ResponseBytesBound(const ModelSignature& sig,
                                          const std::vector<size_t>& selected, int64_t rows);
// Bytes of the selected outputs as computed.
int64_t ResponseBytes(const std::vector<Tensor>& outputs, const std::vector<size_t>& selected);
// RESOURCE_EXHAUSTED when a response of `bytes` tensor bytes would pass `limit` (the
// transport's message limit, server.max_message_bytes): refused before it is computed where
// the shapes tell, else before it is encoded. A response past 2 GiB would abort the
// process in the protobuf serializer.
absl::Status CheckResponseBytes(int64_t bytes, int64_t limit);
// Before the run: CheckResponseBytes on ResponseBytesBound where the shapes tell (OK where
// they do not: the outputs are measured once computed).
absl::Status CheckResponseBound(const ModelSignature& sig, const std::vector<size_t>& selected,
                                int64_t rows, int64_t limit);

// An input decoded by a KServe v2 transport (which sends a list, not a map).
struct NamedTensor {
  std::string name;
  Tensor tensor;
};
// The rules of ValidateInputs for inputs already decoded: every model input exactly once, no
// unknown names, dtypes, shapes, one batch size. Dtypes are named as the v2 protocol names
// them (FP32, not FLOAT).
absl::StatusOr<ValidatedInputs> ValidateNamedInputs(const ModelSignature& sig,
                                                    std::vector<NamedTensor> inputs);
// One v2 input's declared datatype and shape, before its data is decoded: a wrong datatype is
// reported as such rather than as data that does not parse, and no data is decoded for an
// input the model would refuse.
absl::Status CheckDeclaredInput(const ModelSignature& sig, const std::string& name, DType dtype,
                                const std::vector<int64_t>& shape);
// Indices into sig.outputs for the requested names, each at most once (empty: all).
absl::StatusOr<std::vector<size_t>> SelectNamedOutputs(const ModelSignature& sig,
                                                       const std::vector<std::string>& names,
                                                       const char* where = "requested");

}  // namespace kiln::server
