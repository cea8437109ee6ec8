#include "compiler/passes/fuse_concat_elementwise.h"

#include <algorithm>

#include "ir/kiln_ops.h"

namespace kiln::passes {
namespace {

bool StaticFloat(const Value* v) {
  return v && v->dtype == DType::kFloat32 && v->shape && IsStatic(*v->shape);
}

// The Concat's output when it is a channel concatenation of float rank-3..5 inputs.
const Value* ChannelConcat(const Node& n) {
  if (!n.domain.empty() || n.op_type != "Concat" || n.inputs.size() < 2) return nullptr;
  const Value* y = n.output(0);
  if (!StaticFloat(y)) return nullptr;
  const int64_t rank = static_cast<int64_t>(y->shape->size());
  const int64_t axis = n.GetInt("axis", 0);
  if (rank < 3 || rank > 5 || (axis != 1 && axis != 1 - rank)) return nullptr;
  for (const Value* v : n.inputs) {
    if (!StaticFloat(v) || v->shape->size() != y->shape->size()) return nullptr;
  }
  return y;
}

// Whether `s` broadcasts into `y` as a per-channel, per-image or scalar operand.
bool PerChannel(std::vector<int64_t> s, const std::vector<int64_t>& y) {
  if (s.size() > y.size()) return false;
  s.insert(s.begin(), y.size() - s.size(), 1);
  if ((s[0] != 1 && s[0] != y[0]) || (s[1] != 1 && s[1] != y[1])) return false;
  return std::all_of(s.begin() + 2, s.end(), [](int64_t d) { return d == 1; });
}

// Whether `reader` is a program that may take the concatenation `y` as its operand 0.
bool Fusable(const Graph& graph, const Node& reader, const Value* y) {
  if (reader.domain != kKilnDomain || reader.op_type != kiln_ops::kFusedElementwise ||
      kiln_ops::ConcatInputs(reader) != 0 || !StaticFloat(reader.output(0)) ||
      !(*reader.output(0)->shape == *y->shape) || reader.outputs.size() != 1) {
    return false;
  }
  absl::StatusOr<kiln_ops::Program> p = kiln_ops::ReadProgram(reader);
  if (!p.ok() || (p->dtype != DType::kFloat32 && p->dtype != DType::kUndefined)) return false;
  for (const kiln_ops::Instruction& i : p->instructions) {
    if (i.op == "QuantizeLinear" || i.op == "DequantizeLinear" || i.op == "Cast") return false;
  }
  const std::vector<int64_t> dims = StaticDims(*y->shape);
  int uses = 0;
  for (const Value* v : reader.inputs) {
    if (v == y) {
      ++uses;
      continue;
    }
    if (!v || !v->shape || !IsStatic(*v->shape) || !PerChannel(StaticDims(*v->shape), dims)) {
      return false;
    }
  }
  return uses == 1 && !graph.IsGraphOutput(y);
}

// Rewires `reader` to read the Concat's inputs as its operand 0 (the operand count and so
// the results' indices stay the same: one operand replaced by one).
void Rewire(Node& reader, const Node& concat, const Value* y) {
  absl::StatusOr<kiln_ops::Program> p = kiln_ops::ReadProgram(reader);
  std::vector<int64_t> moved(reader.inputs.size());
  std::vector<Value*> inputs = concat.inputs;
  int64_t next = 1;
  for (size_t i = 0; i < reader.inputs.size(); ++i) {
    if (reader.inputs[i] == y) {
      moved[i] = 0;
      continue;
    }
    moved[i] = next++;
    inputs.push_back(reader.inputs[i]);
  }
  const int64_t n = static_cast<int64_t>(reader.inputs.size());
  for (kiln_ops::Instruction& i : p->instructions) {
    for (int64_t& k : i.operands) {
      if (k < n) k = moved[static_cast<size_t>(k)];
    }
  }
  reader.inputs = std::move(inputs);
  reader.attrs[kiln_ops::kConcatInputs] =
      Attribute::Int(static_cast<int64_t>(concat.inputs.size()));
  kiln_ops::WriteProgram(reader, *p);
}

}  // namespace

absl::StatusOr<bool> FuseConcatElementwise(Graph& graph) {
  std::vector<Node*> concats;
  for (const auto& n : graph.nodes()) {
    if (ChannelConcat(*n)) concats.push_back(n.get());
  }
  bool changed = false;
  for (Node* concat : concats) {
    const Value* y = ChannelConcat(*concat);
    const std::vector<Node*> readers = graph.Consumers(y);
    if (readers.size() != 1 || !Fusable(graph, *readers[0], y)) continue;
    Rewire(*readers[0], *concat, y);
    graph.RemoveNode(concat);
    changed = true;
  }
  if (changed) graph.PruneUnusedValues();
  return changed;
}

}  // namespace kiln::passes
