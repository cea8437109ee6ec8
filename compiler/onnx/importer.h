// ONNX ModelProto -> kiln::Graph.
//
// Rules applied:
//  - Initializers become constant Values. A graph input that has an initializer of the same
//    name (ONNX's "overridable default") is treated as that constant and dropped from the
//    graph inputs: Kiln compiles models for serving, where defaults are never overridden, and
//    this lets the compiler fold through them.
//  - Constant nodes (value, value_float(s), value_int(s), sparse forms rejected) become
//    constant Values; no Constant node survives import.
//  - Node inputs must name a graph input, an initializer or a node output; node outputs must
//    be unique (SSA). Nodes are sorted topologically; a cycle is an error.
//  - Operators are then normalized to one form per operator (see normalize.h).
#pragma once

#include <onnx/onnx_pb.h>

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "compiler/onnx/tensor_proto.h"
#include "ir/graph.h"

namespace kiln::onnx_io {

struct ImportOptions {
  std::string model_dir;  // for external data; empty forbids it
  size_t max_tensor_bytes = size_t{16} << 30;
  bool normalize = true;  // run NormalizeOperators after import
  // External data at locations starting with `external_scheme` from the caller's store
  // instead of files (tensor_proto.h).
  std::string external_scheme;
  ExternalResolver external;
};

absl::StatusOr<std::unique_ptr<Graph>> ImportModel(const onnx::ModelProto& model,
                                                   const ImportOptions& options = {});
absl::StatusOr<std::unique_ptr<Graph>> ImportModelBytes(std::string_view bytes,
                                                        const ImportOptions& options = {});
// Reads the file; external data is resolved relative to its folder.
absl::StatusOr<std::unique_ptr<Graph>> ImportModelFile(const std::string& path);

}  // namespace kiln::onnx_io
