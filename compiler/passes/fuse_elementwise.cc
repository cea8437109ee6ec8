#include "compiler/passes/fuse_elementwise.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "compiler/ir/kiln_ops.h"

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

// Grows a group backwards from `last`; `taken` marks nodes already in some group.
Group GrowGroup(const Graph& graph, Node* last, std::unordered_set<Node*>& taken) {
  std::unordered_set<Node*> members = {last};
  bool grew = true;
  while (grew) {
    grew = false;
    for (Node* m : std::vector<Node*>(members.begin(), members.end())) {
      for (Value* in : m->inputs) {
        Node* p = in ? in->producer : nullptr;
        if (!p || members.count(p) || taken.count(p) || !IsFusibleElementwise(*p)) continue;
        if (graph.IsGraphOutput(in)) continue;
        std::vector<Node*> users = graph.Consumers(in);
        bool inside = std::all_of(users.begin(), users.end(),
                                  [&](Node* u) { return members.count(u) > 0; });
        if (!inside) continue;
        members.insert(p);
        grew = true;
      }
    }
  }
  Group g;
  for (const auto& n : graph.nodes()) {
    if (members.count(n.get())) g.push_back(n.get());
  }
  for (Node* n : g) taken.insert(n);
  return g;
}

// Builds the FusedElementwise node for a group (inputs deduplicated, in first-use order).
std::unique_ptr<Node> BuildFused(const Group& group) {
  std::unordered_map<const Value*, int64_t> slot;  // value -> operand index
  std::vector<Value*> inputs;
  std::unordered_map<const Value*, size_t> produced;  // value -> instruction index
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
  if (!node.domain.empty() || !ElementwiseOps().count(node.op_type)) return false;
  if (node.outputs.size() != 1 || !node.output(0)) return false;
  for (const Value* in : node.inputs) {
    if (!in) return false;  // an omitted optional input has no operand encoding
  }
  return true;
}

absl::StatusOr<bool> FuseElementwise(Graph& graph) {
  std::unordered_set<Node*> taken;
  std::vector<Group> groups;
  const auto& nodes = graph.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node* n = it->get();
    if (taken.count(n) || !IsFusibleElementwise(*n)) continue;
    Group g = GrowGroup(graph, n, taken);
    if (g.size() >= 2) groups.push_back(std::move(g));
  }
  for (const Group& g : groups) {
    std::unique_ptr<Node> fused = BuildFused(g);
    Node* last = g.back();
    Node* raw = graph.InsertNode(last, std::move(fused));
    for (Node* n : g) graph.RemoveNode(n);
    raw->outputs[0]->producer = raw;
  }
  if (!groups.empty()) graph.PruneUnusedValues();
  return !groups.empty();
}

}  // namespace kiln::passes
