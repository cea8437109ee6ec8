#include "compiler/onnx/normalize.h"

namespace kiln::onnx_io {

absl::Status NormalizeOperators(Graph& graph) {
  (void)graph;
  return absl::OkStatus();
}

}  // namespace kiln::onnx_io
