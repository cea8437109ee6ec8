// Opset normalization: every operator whose signature changed across opsets is rewritten at
// import into one internal form, the form of the newest ai.onnx opset Kiln knows, so passes,
// shape inference and kernels each handle one shape of each operator.
//
// Examples: Squeeze/Unsqueeze/Reduce*/Split axes (or split sizes) given as attributes become
// constant int64 inputs; Clip min/max attributes become inputs; Pad's pads/value attributes
// become inputs; Slice's starts/ends/axes attributes become inputs; Upsample becomes Resize;
// TopK's k attribute becomes an input; Dropout's ratio becomes an input; Softmax/LogSoftmax/
// Hardmax before opset 13 (which flatten to 2-D at `axis`) become a Flatten + op(axis=-1) +
// Reshape chain. node->opset keeps the version the model imported (error messages quote it);
// semantics that depended on it are made explicit in attributes, so kernels never need it.
// Deliberately left alone: operators whose old and new forms differ only in allowed types.
#pragma once

#include "base/status.h"
#include "compiler/ir/graph.h"

namespace kiln::onnx_io {

// The opset version of the internal forms.
inline constexpr int64_t kInternalOpset = 21;

absl::Status NormalizeOperators(Graph& graph);

}  // namespace kiln::onnx_io
