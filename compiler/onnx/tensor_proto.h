// Conversion between onnx::TensorProto and kiln::Tensor, with every size checked: a
// hostile proto produces an error, never an out-of-bounds read or a huge allocation.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "base/status.h"
#include "compiler/ir/tensor.h"

namespace kiln::onnx_io {

struct TensorReadOptions {
  // Folder that external data locations are relative to; empty forbids external data.
  std::string base_dir;
  // Largest tensor accepted (bytes): guards against dims that promise terabytes.
  size_t max_bytes = size_t{16} << 30;
};

// Classifies an ONNX element type number: OK for one Kiln knows, UNIMPLEMENTED for a number
// in the range newer ONNX versions use (int2, float8e8m0, ...), INVALID_ARGUMENT otherwise.
// `what` names the tensor or value in the message.
absl::Status CheckElemType(int32_t elem_type, const std::string& what);

absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& proto,
                                       const TensorReadOptions& options = {});
// Writes raw_data (little-endian), the form ONNX tools read fastest.
onnx::TensorProto TensorToProto(const Tensor& t, const std::string& name);

absl::StatusOr<Tensor> ReadTensorFile(const std::string& path);
absl::Status WriteTensorFile(const Tensor& t, const std::string& name, const std::string& path);

}  // namespace kiln::onnx_io
