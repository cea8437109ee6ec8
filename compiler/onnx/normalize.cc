// Opset normalization: the rule table and its driver. Each rule (compiler/onnx/normalize/, one
// file per family: attributes that became inputs, BatchNormalization, Upsample/Resize, changed
// semantics) rewrites one operator from an older ai.onnx signature into the kInternalOpset
// signature; the table says which rule applies to which operator below which opset. Rules edit
// the node in place (it keeps its name and imported opset) and add helper nodes around it.
#include "compiler/onnx/normalize.h"

#include <algorithm>
#include <limits>

#include "compiler/onnx/normalize/rules.h"

namespace kiln::onnx_io {
namespace {

using namespace normalize;  // the rules (compiler/onnx/normalize/*.cc)

constexpr int64_t kEveryOpset = std::numeric_limits<int64_t>::max();

// The rule table: rule applies to `op` (or every ai.onnx op for "*") imported below opset
// `below`. Order matters where a rule renames the op (Upsample -> Resize runs before the
// Resize rules, which then see the newest form and leave it).

using Rule = absl::Status (*)(Graph&, Node&);
struct RuleEntry {
  const char* op;
  int64_t below;
  Rule rule;
};

constexpr RuleEntry kRules[] = {
    {"*", kEveryOpset, DropConsumedInputs},
    {"Squeeze", 13, AxesAttrToInput},
    {"Unsqueeze", 13, AxesAttrToInput},
    {"ReduceSum", 13, AxesAttrToInput},
    {"ReduceL1", 18, AxesAttrToInput},
    {"ReduceL2", 18, AxesAttrToInput},
    {"ReduceLogSum", 18, AxesAttrToInput},
    {"ReduceLogSumExp", 18, AxesAttrToInput},
    {"ReduceMax", 18, AxesAttrToInput},
    {"ReduceMean", 18, AxesAttrToInput},
    {"ReduceMin", 18, AxesAttrToInput},
    {"ReduceProd", 18, AxesAttrToInput},
    {"ReduceSumSquare", 18, AxesAttrToInput},
    {"Split", 18, SplitSizesToInput},
    {"Clip", 11, ClipAttrsToInputs},
    {"Pad", 11, PadAttrsToInputs},
    {"Slice", 10, SliceAttrsToInputs},
    {"TopK", 10, TopKAttrToInput},
    {"Dropout", 12, DropoutAttrsToInputs},
    {"BatchNormalization", 14, BatchNormLegacy},
    {"Reshape", 5, ReshapeAttrToInput},
    {"Upsample", kEveryOpset, UpsampleToResize},
    {"Resize", 11, Resize10ToNewest},
    {"Resize", 13, ResizeTfHalfPixelForNn},
    {"Resize", kEveryOpset, ResizeOptionalInputs},
    {"Softmax", 13, CoercedSoftmaxToAxis},
    {"LogSoftmax", 13, CoercedSoftmaxToAxis},
    {"Hardmax", 13, CoercedSoftmaxToAxis},
    {"GroupNormalization", 21, GroupNormPerChannel},
    {"Cast", 6, CastStringTo},
    {"Add", 7, LegacyBroadcastToNumpy},
    {"Sub", 7, LegacyBroadcastToNumpy},
    {"Mul", 7, LegacyBroadcastToNumpy},
    {"Div", 7, LegacyBroadcastToNumpy},
    {"Pow", 7, LegacyBroadcastToNumpy},
    {"And", 7, LegacyBroadcastToNumpy},
    {"Or", 7, LegacyBroadcastToNumpy},
    {"Xor", 7, LegacyBroadcastToNumpy},
    {"Equal", 7, LegacyBroadcastToNumpy},
    {"Greater", 7, LegacyBroadcastToNumpy},
    {"Less", 7, LegacyBroadcastToNumpy},
    {"Gemm", 7, GemmLegacyBroadcast},
    {"PRelu", 7, PReluChannelSlope},
    {"Concat", 4, ConcatDefaultAxis},
    {"Scatter", kEveryOpset, ScatterToScatterElements},
    {"Tile", 6, TileAxisToRepeats},
};

absl::Status NormalizeNode(Graph& g, Node& n) {
  if (n.opset <= 0) {
    return absl::InvalidArgumentError(n.Describe() +
                                      ": the model does not import the ai.onnx opset");
  }
  for (const RuleEntry& r : kRules) {
    const bool op_matches = r.op[0] == '*' || n.op_type == r.op;
    if (op_matches && n.opset < r.below) RETURN_IF_ERROR(r.rule(g, n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status NormalizeOperators(Graph& graph) {
  // Rules insert helper nodes; walk a snapshot so helpers (already newest) are not revisited.
  std::vector<Node*> nodes;
  for (const auto& n : graph.nodes()) {
    if (n->domain == kOnnxDomain) nodes.push_back(n.get());
  }
  for (Node* n : nodes) RETURN_IF_ERROR(NormalizeNode(graph, *n));
  // Every ai.onnx node is now in the internal form, so that is the graph's ai.onnx version
  // (what the exporter declares); each node's `opset` still says what the model imported.
  int64_t& version = graph.opsets[kOnnxDomain];
  version = std::max(version, kInternalOpset);
  graph.PruneUnusedValues();
  return absl::OkStatus();
}

}  // namespace kiln::onnx_io
