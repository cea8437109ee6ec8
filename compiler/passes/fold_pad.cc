#include "compiler/passes/fold_pad.h"

#include <optional>

namespace kiln::passes {
namespace {

// The Pad's spatial pads in ONNX order (begin of each spatial dim, then end of each), or
// nullopt when the Pad is not a zero constant pad of spatial dims only.
std::optional<std::vector<int64_t>> SpatialZeroPads(const Node& pad) {
  if (pad.GetString("mode", "constant") != "constant") return std::nullopt;
  const Value* x = pad.input(0);
  const Value* p = pad.input(1);
  if (!x || !x->shape || !p || !p->constant) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(x->shape->size());
  if (rank < 3) return std::nullopt;
  if (const Value* fill = pad.input(2)) {
    if (!fill->constant || fill->constant->numel() != 1 || fill->constant->GetDouble(0) != 0.0) {
      return std::nullopt;
    }
  }
  // pads[i] and pads[i + naxes] belong to axes[i] (all axes in order when absent).
  std::vector<int64_t> axes;
  if (const Value* a = pad.input(3)) {
    if (!a->constant) return std::nullopt;
    axes = a->constant->ToInt64Vector();
  } else {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  const std::vector<int64_t> given = p->constant->ToInt64Vector();
  const size_t n = axes.size();
  if (given.size() != 2 * n) return std::nullopt;
  std::vector<int64_t> full(2 * rank, 0);
  for (size_t i = 0; i < n; ++i) {
    const int64_t axis = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (axis < 0 || axis >= rank) return std::nullopt;
    full[axis] += given[i];
    full[axis + rank] += given[i + n];
  }
  for (int64_t v : full) {
    if (v < 0) return std::nullopt;
  }
  if (full[0] || full[1] || full[rank] || full[rank + 1]) return std::nullopt;
  std::vector<int64_t> spatial;
  for (int64_t side = 0; side < 2; ++side) {
    for (int64_t d = 2; d < rank; ++d) spatial.push_back(full[side * rank + d]);
  }
  return spatial;
}

// The reader's pads with the Pad's added, setting what the reader needs for the sum to mean
// the same; false when this reader cannot take them.
bool AbsorbInto(Node& reader, const std::vector<int64_t>& add) {
  const std::string auto_pad = reader.GetString("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") return false;
  std::vector<int64_t> pads = reader.GetInts("pads", std::vector<int64_t>(add.size(), 0));
  if (pads.size() != add.size()) return false;
  if (reader.op_type == "AveragePool") {
    if (reader.GetInt("ceil_mode", 0) != 0) return false;
    if (reader.GetInt("count_include_pad", 0) == 0) {
      for (int64_t v : pads) {
        if (v != 0) return false;
      }
      reader.attrs["count_include_pad"] = Attribute::Int(1);
    }
  } else if (reader.op_type != "Conv") {
    return false;
  }
  for (size_t i = 0; i < pads.size(); ++i) pads[i] += add[i];
  reader.attrs["pads"] = Attribute::Ints(std::move(pads));
  reader.attrs["auto_pad"] = Attribute::String("NOTSET");
  return true;
}

}  // namespace

absl::StatusOr<bool> FoldPad(Graph& graph) {
  std::vector<Node*> pads;
  for (const auto& n : graph.nodes()) {
    if (n->domain.empty() && n->op_type == "Pad") pads.push_back(n.get());
  }
  bool changed = false;
  for (Node* pad : pads) {
    std::optional<std::vector<int64_t>> add = SpatialZeroPads(*pad);
    if (!add) continue;
    Value* padded = pad->output(0);
    for (Node* reader : graph.Consumers(padded)) {
      // Only the data input: a padded tensor used as weights is not padding the reader does.
      if (!reader->domain.empty() || reader->input(0) != padded) continue;
      bool elsewhere = false;
      for (size_t i = 1; i < reader->inputs.size(); ++i) elsewhere |= reader->inputs[i] == padded;
      if (elsewhere || !AbsorbInto(*reader, *add)) continue;
      reader->inputs[0] = pad->input(0);
      changed = true;
    }
    if (graph.Consumers(padded).empty() && !graph.IsGraphOutput(padded)) graph.RemoveNode(pad);
  }
  if (changed) graph.PruneUnusedValues();
  return changed;
}

}  // namespace kiln::passes
