// kiln.v1.Tensor <-> kiln::Tensor. Decoding checks everything a client can get wrong (dtype,
// shape, byte count, which typed field) and says exactly what, so the message can go back
// to the client as INVALID_ARGUMENT.
#pragma once

#include <string>

#include "base/status.h"
#include "ir/tensor.h"
#include "kiln/v1/tensor.pb.h"

namespace kiln::server {

// `what` names the tensor in errors ("input 'x'").
absl::StatusOr<Tensor> DecodeTensor(const v1::Tensor& proto, const std::string& what);
// The same checks, but raw_data's bytes move into the tensor instead of being copied (the
// proto's raw_data is left empty). For requests the server owns and reads no further.
absl::StatusOr<Tensor> TakeTensor(v1::Tensor* proto, const std::string& what);
// typed: fill the typed repeated field for the dtype (JSON-friendly) when there is one;
// otherwise raw_data.
void EncodeTensor(const Tensor& t, bool typed, v1::Tensor* out);

}  // namespace kiln::server
