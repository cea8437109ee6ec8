// Internal to the opset normalizer: the rules the table in normalize.cc applies. Each rewrites
// one node (in place, adding helper nodes around it) from an older ai.onnx signature into the
// kInternalOpset one; the comment at each definition says what changed and when.
#pragma once

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::onnx_io::normalize {

absl::Status DropConsumedInputs(Graph& g, Node& n);
absl::Status AxesAttrToInput(Graph& g, Node& n);
absl::Status SplitSizesToInput(Graph& g, Node& n);
absl::Status ClipAttrsToInputs(Graph& g, Node& n);
absl::Status PadAttrsToInputs(Graph& g, Node& n);
absl::Status SliceAttrsToInputs(Graph& g, Node& n);
absl::Status TopKAttrToInput(Graph& g, Node& n);
absl::Status DropoutAttrsToInputs(Graph& g, Node& n);
absl::Status BatchNormLegacy(Graph& g, Node& n);
absl::Status ReshapeAttrToInput(Graph& g, Node& n);
absl::Status UpsampleToResize(Graph& g, Node& n);
absl::Status Resize10ToNewest(Graph& g, Node& n);
absl::Status ResizeTfHalfPixelForNn(Graph& g, Node& n);
absl::Status ResizeOptionalInputs(Graph& g, Node& n);
absl::Status CoercedSoftmaxToAxis(Graph& g, Node& n);
absl::Status GroupNormPerChannel(Graph& g, Node& n);
absl::Status CastStringTo(Graph& g, Node& n);
absl::Status LegacyBroadcastToNumpy(Graph& g, Node& n);
absl::Status GemmLegacyBroadcast(Graph& g, Node& n);
absl::Status PReluChannelSlope(Graph& g, Node& n);
absl::Status ConcatDefaultAxis(Graph& g, Node& n);
absl::Status ScatterToScatterElements(Graph& g, Node& n);
absl::Status TileAxisToRepeats(Graph& g, Node& n);

}  // namespace kiln::onnx_io::normalize
