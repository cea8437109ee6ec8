// Tensors of the KServe v2 protocol <-> kiln::Tensor, for both transports: gRPC (raw bytes or
// InferTensorContents) and REST (JSON `data` or the binary extension's raw bytes). Decoding
// checks everything a client can get wrong (datatype name, shape, element or byte count, the
// contents field, integer ranges) and says exactly what, as INVALID_ARGUMENT; a size is always
// checked against the data actually sent before anything is allocated.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"
#include "base/status.h"
#include "ir/tensor.h"
#include "kserve/grpc_service.pb.h"
#include "server/common/wire_checks.h"

namespace kiln::server::kserve {

// The protocol's name for a dtype ("FP32", "INT64", ...); empty for dtypes it cannot name
// (float8, int4, ...: such models are served through kiln.v1 only).
std::string DataTypeName(DType t);
// Triton's model-configuration enum for a dtype (TYPE_INVALID when it has none).
inference::DataType ConfigDataType(DType t);
// A datatype name from a request. BYTES is a protocol type but no Kiln model input holds
// strings: it is refused here, naming `what`.
absl::StatusOr<DType> ParseDataType(std::string_view name, const std::string& what);

// Raw little-endian bytes (raw_input_contents, or a slice of a REST body). The tensor views
// `bytes` inside `owner` without a copy when it is aligned for the dtype.
absl::StatusOr<Tensor> FromRawBytes(DType dtype, std::vector<int64_t> shape,
                                    std::shared_ptr<std::string> owner, std::string_view bytes,
                                    const std::string& what);
// gRPC's typed contents: only the field for the dtype may be set (FP16/BF16 have none).
absl::StatusOr<Tensor> FromContents(DType dtype, std::vector<int64_t> shape,
                                    const inference::InferTensorContents& contents,
                                    const std::string& what);
// True when any field of `contents` holds an element.
bool HasContents(const inference::InferTensorContents& contents);
// REST's `data`: a flat or nested array of numbers (booleans for BOOL), row-major.
absl::StatusOr<Tensor> FromJsonData(DType dtype, std::vector<int64_t> shape,
                                    const json::Value& data, const std::string& what);

// One output as the protocol returns it: a tensor, or BYTES strings (classification).
struct Output {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  Tensor tensor;                     // numeric outputs
  std::vector<std::string> strings;  // BYTES outputs, row-major
  bool binary = false;               // REST: raw bytes after the JSON instead of `data`
};

Output NumericOutput(std::string name, Tensor t);
// The classification extension: the top `k` classes per batch row (per tensor when
// `batched` is false) as "score:index" strings, highest score first (ties: lower index), in a
// [rows, k] (or [k]) BYTES tensor; k is clamped to the class count.
absl::StatusOr<Output> Classify(std::string name, const Tensor& t, int64_t k, bool batched);

// The output's raw bytes (BYTES: each element a 4-byte little-endian length, then its bytes).
void AppendRawBytes(const Output& o, std::string* out);
size_t RawByteSize(const Output& o);
// The output's elements as a flat JSON array.
void WriteJsonData(const Output& o, json::Writer& w);

}  // namespace kiln::server::kserve
