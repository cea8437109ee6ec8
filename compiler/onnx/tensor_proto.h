// Conversion between onnx::TensorProto and kiln::Tensor, with every size checked: a
// hostile proto produces an error, never an out-of-bounds read or a huge allocation.
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "ir/tensor.h"

namespace kiln::onnx_io {

// Resolves a tensor stored as external data from a store the caller owns (the engine
// cache's weight blobs, the model's own bytes) instead of a file: `location` as written,
// dtype and dims from the proto. The result must have exactly that dtype and shape.
using ExternalResolver = std::function<absl::StatusOr<Tensor>(
    const std::string& location, DType dtype, const std::vector<int64_t>& dims)>;

struct TensorReadOptions {
  // Folder that external data locations are relative to; empty forbids external data.
  std::string base_dir;
  // Largest tensor accepted (bytes): guards against dims that promise terabytes.
  size_t max_bytes = size_t{16} << 30;
  // When set, external tensors whose location starts with `external_scheme` go through it;
  // other locations are files under base_dir.
  std::string external_scheme;
  ExternalResolver external;
};

// Classifies an ONNX element type number: OK for one Kiln knows, UNIMPLEMENTED for a number
// in the range newer ONNX versions use (int2, float8e8m0, ...), INVALID_ARGUMENT otherwise.
// `what` names the tensor or value in the message.
absl::Status CheckElemType(int32_t elem_type, const std::string& what);

absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& proto,
                                       const TensorReadOptions& options = {});
// A tensor from ONNX's stored form of its elements (raw_data's layout: sub-byte types packed),
// copied once. INVALID_ARGUMENT when `stored` is not the size `dims` need.
absl::StatusOr<Tensor> TensorFromStored(std::string_view stored, DType dtype,
                                        const std::vector<int64_t>& dims);
// Writes raw_data (little-endian), the form ONNX tools read fastest.
onnx::TensorProto TensorToProto(const Tensor& t, const std::string& name);

absl::StatusOr<Tensor> ReadTensorFile(const std::string& path);
absl::Status WriteTensorFile(const Tensor& t, const std::string& name, const std::string& path);

}  // namespace kiln::onnx_io
