#include "compiler/passes/recognize_match.h"

#include <algorithm>
#include <cmath>

namespace kiln::passes::recognize {

std::unique_ptr<Node> Rewriter::NewNode(const std::string& op_type, const std::string& domain,
                                        int64_t min_opset) const {
  auto n = std::make_unique<Node>();
  n->op_type = op_type;
  n->domain = domain;
  auto it = graph.opsets.find(domain);
  n->opset = std::max(it == graph.opsets.end() ? int64_t{1} : it->second, min_opset);
  return n;
}

Node* Rewriter::Replace(const PatternMatch& m, std::unique_ptr<Node> replacement) {
  Node* last = m.output->producer;
  if (replacement->name.empty()) replacement->name = last->name;
  replacement->outputs = {m.output};
  Node* raw = graph.InsertNode(last, std::move(replacement));
  for (Node* n : m.nodes) {
    removed.insert(n);
    graph.RemoveNode(n);
  }
  m.output->producer = raw;  // RemoveNode cleared it when it removed the old producer
  return raw;
}

bool IsOnnxOp(const Node* n, const char* op) { return n && n->domain.empty() && n->op_type == op; }

Node* OnlyConsumer(const Graph& graph, const Value* v) {
  if (!v || graph.IsGraphOutput(v)) return nullptr;
  std::vector<Node*> users = graph.Consumers(v);
  return users.size() == 1 ? users[0] : nullptr;
}

Value* OtherOperand(const Node& n, const Value* v) {
  if (n.inputs.size() != 2 || !n.input(0) || !n.input(1)) return nullptr;
  if (n.input(0) == v) return n.input(1);
  if (n.input(1) == v) return n.input(0);
  return nullptr;
}

std::optional<double> ScalarOf(const Value* v) {
  if (!v || !v->constant || v->constant->numel() != 1 || !IsFloatDType(v->dtype)) {
    return std::nullopt;
  }
  return v->constant->GetDouble(0);
}

bool IsNear(double got, double want) { return std::fabs(got - want) <= 1e-4 * std::fabs(want); }

bool IsScalarNear(const Value* v, double want) {
  std::optional<double> s = ScalarOf(v);
  return s && IsNear(*s, want);
}

bool IsFloatValue(const Value* v) { return v && IsFloatDType(v->dtype); }

bool IsSelfContained(const Graph& graph, const PatternMatch& m) {
  std::unordered_set<const Node*> inside(m.nodes.begin(), m.nodes.end());
  for (const Node* n : m.nodes) {
    for (const Value* out : n->outputs) {
      if (!out || out == m.output) continue;
      if (graph.IsGraphOutput(out)) return false;
      for (const Node* user : graph.Consumers(out)) {
        if (!inside.count(user)) return false;
      }
    }
  }
  return true;
}

bool IsScaleOf(const Node* n, const Value* v, double factor) {
  if (IsOnnxOp(n, "Mul")) {
    Value* other = OtherOperand(*n, v);
    return other && IsScalarNear(other, factor);
  }
  return IsOnnxOp(n, "Div") && n->input(0) == v && IsScalarNear(n->input(1), 1.0 / factor);
}

Node* ScaleAfter(const Graph& graph, const Value* v, double factor) {
  Node* n = OnlyConsumer(graph, v);
  return IsScaleOf(n, v, factor) ? n : nullptr;
}

Value* ScaledInput(const Node* n, double factor) {
  if (!n) return nullptr;
  for (Value* v : n->inputs) {
    if (v && !v->constant && IsScaleOf(n, v, factor)) return v;
  }
  return nullptr;
}

}  // namespace kiln::passes::recognize
