#include "compiler/passes/fuse_elementwise.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "ir/graph_edit.h"
#include "ir/kiln_ops.h"

namespace kiln::passes {
namespace {

const std::set<std::string>& ElementwiseOps() {
  static const auto* ops = new std::set<std::string>{
      "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Cos", "Cosh", "Erf",
      "Exp", "Floor", "Log", "Neg", "Not", "Reciprocal", "Round", "Sign", "Sin", "Sinh",
      "Sqrt", "Tan", "Tanh", "Celu", "Clip", "Elu", "Gelu", "HardSigmoid", "HardSwish",
      "LeakyRelu", "Mish", "PRelu", "Relu", "Selu", "Shrink", "Sigmoid", "Softplus",
      "Softsign", "ThresholdedRelu", "Add", "And", "Div", "Equal", "Greater",
      "GreaterOrEqual", "Less", "LessOrEqual", "Max", "Mean", "Min", "Mul", "Or", "Pow",
      "Sub", "Sum", "Where", "Xor", "IsNaN", "IsInf", "Cast"};
  return *ops;
}

using Group = std::vector<Node*>;  // in schedule order

bool IsInt8(DType t) { return t == DType::kUInt8 || t == DType::kInt8; }

// A one-element (per-tensor) constant: a Q/DQ scale or zero point.
const Tensor* ScalarConstant(const Value* v) {
  if (!v || !v->is_constant() || v->constant->numel() != 1 || v->constant->rank() > 1) {
    return nullptr;
  }
  return &*v->constant;
}

// A per-tensor DequantizeLinear of uint8/int8 data into float32, or QuantizeLinear of float32
// into uint8/int8, with a constant float32 scale and (optional) constant zero point: the
// forms a fused program's kernels compute exactly like the reference.
bool IsFusibleQdq(const Node& node) {
  const bool quantize = node.op_type == "QuantizeLinear";
  if (node.inputs.size() < 2 || node.inputs.size() > 3) return false;
  const Value* x = node.inputs[0];
  const Value* y = node.output(0);
  const Tensor* scale = ScalarConstant(node.inputs[1]);
  const Tensor* zero = node.inputs.size() > 2 ? ScalarConstant(node.inputs[2]) : nullptr;
  if (!x || !scale || scale->dtype() != DType::kFloat32 || (node.inputs.size() > 2 && !zero)) {
    return false;
  }
  const DType q = quantize ? y->dtype : x->dtype;  // the integer side
  const DType f = quantize ? x->dtype : y->dtype;
  if (!IsInt8(q) || f != DType::kFloat32 || (zero && zero->dtype() != q)) return false;
  const int64_t out_attr = node.GetInt("output_dtype", 0);
  if (out_attr != 0 && out_attr != static_cast<int64_t>(y->dtype)) return false;
  const int64_t precision = node.GetInt("precision", 0);
  return precision == 0 || precision == static_cast<int64_t>(DType::kFloat32);
}

bool IsQuantize(const Node& node) { return node.domain.empty() && node.op_type == "QuantizeLinear"; }
bool IsDequantize(const Node& node) {
  return node.domain.empty() && node.op_type == "DequantizeLinear";
}

// A node's inputs without repeats (Add(x, x) reads x once).
std::vector<const Value*> DistinctInputs(const Node& n) {
  std::vector<const Value*> ins;
  ins.reserve(n.inputs.size());
  if (n.inputs.size() <= 16) {  // the usual case: a scan beats a set
    for (const Value* in : n.inputs) {
      if (in && std::find(ins.begin(), ins.end(), in) == ins.end()) ins.push_back(in);
    }
    return ins;
  }
  absl::flat_hash_set<const Value*> seen;
  for (const Value* in : n.inputs) {
    if (in && seen.insert(in).second) ins.push_back(in);
  }
  return ins;
}

// What GrowGroup asks of the graph, indexed once per pass (the graph does not change while
// groups are found): how many nodes read each value, the graph outputs, node positions.
struct GraphIndex {
  absl::flat_hash_map<const Value*, size_t> readers;
  absl::flat_hash_set<const Value*> outputs;
  absl::flat_hash_map<const Node*, size_t> position;

  explicit GraphIndex(const Graph& graph) : outputs(graph.outputs.begin(), graph.outputs.end()) {
    const auto& nodes = graph.nodes();
    position.reserve(nodes.size());
    readers.reserve(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      position[nodes[i].get()] = i;
      for (const Value* in : DistinctInputs(*nodes[i])) ++readers[in];
    }
  }
};

// Grows a group backwards from `last`; `taken` marks nodes already in some group. A producer
// joins when all readers of the value it gives the group are members. Joining only makes
// that easier, so the group is the closure whatever the order: a worklist finds it, checking
// a member's inputs when it joins (a producer refused then is checked again when the reader
// that kept it out joins, since that reader's inputs are checked in turn).
Group GrowGroup(const GraphIndex& index, Node* last, absl::flat_hash_set<Node*>& taken) {
  absl::flat_hash_set<Node*> members = {last};
  absl::flat_hash_map<const Value*, size_t> inside;  // value -> members reading it
  std::vector<Node*> work = {last};
  while (!work.empty()) {
    Node* m = work.back();
    work.pop_back();
    for (const Value* in : DistinctInputs(*m)) ++inside[in];
    for (size_t k = 0; k < m->inputs.size(); ++k) {
      Value* in = m->inputs[k];
      Node* p = in ? in->producer : nullptr;
      if (!p || members.count(p) || taken.count(p) || !IsFusibleElementwise(*p)) continue;
      // A QuantizeLinear only ends a program (its integer result is the output), and a
      // DequantizeLinear reads its integer data from a program input.
      if (IsQuantize(*p) || (IsDequantize(*m) && k == 0)) continue;
      if (index.outputs.count(in)) continue;
      if (inside[in] != index.readers.at(in)) continue;
      members.insert(p);
      work.push_back(p);
    }
  }
  Group g(members.begin(), members.end());
  std::sort(g.begin(), g.end(), [&index](const Node* a, const Node* b) {
    return index.position.at(a) < index.position.at(b);
  });
  for (Node* n : g) taken.insert(n);
  return g;
}

// Builds the FusedElementwise node for a group (inputs deduplicated, in first-use order).
std::unique_ptr<Node> BuildFused(const Group& group) {
  absl::flat_hash_map<const Value*, int64_t> slot;  // value -> operand index
  std::vector<Value*> inputs;
  absl::flat_hash_map<const Value*, size_t> produced;  // value -> instruction index
  for (size_t i = 0; i < group.size(); ++i) produced[group[i]->output(0)] = i;
  for (Node* n : group) {
    for (Value* in : n->inputs) {
      if (in && !produced.count(in) && !slot.count(in)) {
        slot[in] = static_cast<int64_t>(inputs.size());
        inputs.push_back(in);
      }
    }
  }
  kiln_ops::Program program;
  for (Node* n : group) {
    kiln_ops::Instruction ins;
    ins.op = n->op_type;
    ins.attrs = n->attrs;
    for (Value* in : n->inputs) {
      // Omitted optional inputs (Clip without min) cannot be encoded; IsFusible excludes them.
      ins.operands.push_back(produced.count(in)
                                 ? static_cast<int64_t>(inputs.size() + produced.at(in))
                                 : slot.at(in));
    }
    program.instructions.push_back(std::move(ins));
  }
  Value* out = group.back()->output(0);
  program.dtype = out->dtype;
  auto fused = std::make_unique<Node>();
  fused->name = group.back()->name + "_fused";
  fused->op_type = kiln_ops::kFusedElementwise;
  fused->domain = kKilnDomain;
  fused->opset = 1;
  fused->inputs = inputs;
  fused->outputs = {out};
  kiln_ops::WriteProgram(*fused, program);
  return fused;
}

}  // namespace

bool IsFusibleElementwise(const Node& node) {
  if (!node.domain.empty()) return false;
  const bool qdq = IsQuantize(node) || IsDequantize(node);
  if (!qdq && !ElementwiseOps().count(node.op_type)) return false;
  if (node.outputs.size() != 1 || !node.output(0)) return false;
  for (const Value* in : node.inputs) {
    if (!in) return false;  // an omitted optional input has no operand encoding
  }
  return !qdq || IsFusibleQdq(node);
}

absl::StatusOr<bool> FuseElementwise(Graph& graph) {
  absl::flat_hash_set<Node*> taken;
  std::vector<Group> groups;
  {
    const GraphIndex index(graph);
    const auto& nodes = graph.nodes();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      Node* n = it->get();
      if (taken.count(n) || !IsFusibleElementwise(*n)) continue;
      Group g = GrowGroup(index, n, taken);
      if (g.size() >= 2) groups.push_back(std::move(g));
    }
  }
  // Each program takes its group's last place; all groups in one edit of the node list.
  std::vector<std::pair<Node*, std::unique_ptr<Node>>> fused;
  std::vector<Node*> swallowed;
  for (const Group& g : groups) {
    fused.emplace_back(g.back(), BuildFused(g));
    swallowed.insert(swallowed.end(), g.begin(), g.end());
  }
  std::vector<Node*> programs;
  for (const auto& f : fused) programs.push_back(f.second.get());
  InsertNodes(graph, std::move(fused));
  RemoveNodes(graph, swallowed);
  for (Node* p : programs) p->outputs[0]->producer = p;
  if (!groups.empty()) graph.PruneUnusedValues();
  return !groups.empty();
}

}  // namespace kiln::passes
