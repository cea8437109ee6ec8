// kiln::Graph -> ONNX ModelProto. Kiln's own operators are written in domain "ai.kiln" (with
// an opset import for it), so an optimized graph opens in Netron and round-trips through the
// importer unchanged: import -> export -> import yields the same graph.
//
// The ai.onnx version written is graph.opsets[""]: after NormalizeOperators that is the
// internal opset (every node is in that form), so a normalized graph is written at opset 21
// while node->opset (the imported version) is not preserved. Values are written with what the
// graph knows of them; ONNX requires typed graph inputs and outputs, so run shape inference
// before exporting a graph whose outputs are untyped if the file must pass onnx.checker.
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>
#include <optional>
#include <string>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::onnx_io {

// Takes a constant's bytes out of the written model: the location returned is written as
// the initializer's external data (location and length, data_location EXTERNAL) and the
// caller stores the bytes (the engine cache's weight blobs; ImportOptions::external reads
// them back). nullopt: the bytes are written inline as raw_data.
using ExternalWriter = std::function<std::optional<std::string>(const Tensor&)>;

struct ExportOptions {
  ExternalWriter external;  // the top-level graph's initializers only; bodies stay inline
};

absl::StatusOr<onnx::ModelProto> ExportModel(const Graph& graph, const ExportOptions& options = {});
absl::Status ExportModelFile(const Graph& graph, const std::string& path);

}  // namespace kiln::onnx_io
