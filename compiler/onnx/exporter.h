// kiln::Graph -> ONNX ModelProto. Kiln's own operators are written in domain "ai.kiln" (with
// an opset import for it), so an optimized graph opens in Netron and round-trips through the
// importer unchanged: import -> export -> import yields the same graph.
#pragma once

#include <string>

#include <onnx/onnx_pb.h>

#include "base/status.h"
#include "compiler/ir/graph.h"

namespace kiln::onnx_io {

absl::StatusOr<onnx::ModelProto> ExportModel(const Graph& graph);
absl::Status ExportModelFile(const Graph& graph, const std::string& path);

}  // namespace kiln::onnx_io
