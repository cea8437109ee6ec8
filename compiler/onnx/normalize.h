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
//
// After it runs, graph.opsets[""] is at least kInternalOpset (every ai.onnx node is in that
// form; the exporter writes that version). Nodes of other domains are untouched; an ai.onnx
// node without an imported ai.onnx version is INVALID_ARGUMENT, an old form with no newest
// equivalent (e.g. Tile-1 with run-time tiles) UNIMPLEMENTED naming the node and its opset.
// Rules key on node->opset, so the pass is meant to run once per import: running it again
// re-applies rules that change meaning without changing form (GroupNormalization-18's
// per-group scale).
//
// The rule table (normalize.cc) covers: consumed_inputs (any); Squeeze/Unsqueeze/ReduceSum
// <13 and the other Reduce* <18 (axes); Split <18 (split sizes, num_outputs); Clip <11; Pad
// <11 (pads/paddings, value); Slice <10; TopK <10; Dropout <12 (ratio, is_test, mask type
// <10); BatchNormalization <14 (is_test, spatial incl. spatial=0, outputs); Reshape <5;
// Upsample (any) -> Resize; Resize-10 (asymmetric, floor/ceil per Resize-10's rounding);
// Resize <13 tf_half_pixel_for_nn; Resize roi/empty scales -> omitted; Softmax/LogSoftmax/
// Hardmax <13; GroupNormalization <21; Cast <6 (string `to`); legacy broadcast/axis on
// Add/Sub/Mul/Div/Pow/And/Or/Xor/Equal/Greater/Less <7 and Gemm <7; PRelu <7 (per-channel
// slope); Concat <4 (default axis); Scatter -> ScatterElements; Tile <6.
#pragma once

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::onnx_io {

// The opset version of the internal forms.
inline constexpr int64_t kInternalOpset = 21;

absl::Status NormalizeOperators(Graph& graph);

}  // namespace kiln::onnx_io
