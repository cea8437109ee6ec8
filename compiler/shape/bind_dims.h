// Values for the symbolic dims of a model's inputs other than the batch dim (a transformer's
// `sequence`, an image model's height and width), given by the user: the command line's
// `--dim NAME=N` and the model config's `input_shapes`. Engines are compiled for static
// shapes, so every such dim needs a value before compiling; the batch dim (0) is bound later,
// per bucket, by Specialize.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::shape {

struct InputDims {
  // Symbol name (ONNX dim_param) -> value, for every input dim carrying that name.
  std::map<std::string, int64_t> symbols;
  // Input name -> its whole shape; -1 leaves a dim as the model declares it (the batch).
  std::map<std::string, std::vector<int64_t>> shapes;

  bool empty() const { return symbols.empty() && shapes.empty(); }
  // A stable text form, for cache keys ("shapes=ids:-1x128;symbols=sequence:128").
  std::string ToString() const;
};

// Writes the values into the graph's input shapes. A value given for one input's named dim
// also binds that name on every other input (the same name is the same size). Errors
// (INVALID_ARGUMENT, naming the input, dim and symbol): an unknown input or symbol, a rank
// mismatch, a value that contradicts a static dim or another value for the same symbol, and a
// value below 1. Shapes of inner values are not re-inferred here (Specialize does that).
absl::Status BindInputDims(Graph& graph, const InputDims& dims);

// OK when every input dim except dim 0 is static; else INVALID_ARGUMENT naming the first
// input dim without a value and how to give it one.
absl::Status CheckStaticInputs(const Graph& graph, bool allow_symbolic_batch);

}  // namespace kiln::shape
