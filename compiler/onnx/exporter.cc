#include "compiler/onnx/exporter.h"

namespace kiln::onnx_io {

absl::StatusOr<onnx::ModelProto> ExportModel(const Graph& graph) {
  (void)graph;
  return absl::UnimplementedError("export not written yet");
}

absl::Status ExportModelFile(const Graph& graph, const std::string& path) {
  (void)graph;
  (void)path;
  return absl::UnimplementedError("export not written yet");
}

}  // namespace kiln::onnx_io
