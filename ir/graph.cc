#include "ir/graph.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <unordered_set>

#include "absl/container/flat_hash_set.h"

namespace kiln {

std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    if (shape[i].known()) {
      s += std::to_string(shape[i].value);
    } else {
      s += shape[i].param.empty() ? "?" : shape[i].param;
    }
  }
  return s + "]";
}

bool IsStatic(const Shape& shape) {
  return std::all_of(shape.begin(), shape.end(), [](const Dim& d) { return d.known(); });
}

std::vector<int64_t> StaticDims(const Shape& shape) {
  std::vector<int64_t> v;
  v.reserve(shape.size());
  for (const Dim& d : shape) v.push_back(d.value);
  return v;
}

Shape ToShape(const std::vector<int64_t>& dims) { return Shape(dims.begin(), dims.end()); }

Attribute Attribute::Int(int64_t v) {
  Attribute a;
  a.kind = Kind::kInt;
  a.i = v;
  return a;
}
Attribute Attribute::Float(float v) {
  Attribute a;
  a.kind = Kind::kFloat;
  a.f = v;
  return a;
}
Attribute Attribute::String(std::string v) {
  Attribute a;
  a.kind = Kind::kString;
  a.s = std::move(v);
  return a;
}
Attribute Attribute::TensorValue(Tensor v) {
  Attribute a;
  a.kind = Kind::kTensor;
  a.t = std::move(v);
  return a;
}
Attribute Attribute::Ints(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Kind::kInts;
  a.ints = std::move(v);
  return a;
}
Attribute Attribute::Floats(std::vector<float> v) {
  Attribute a;
  a.kind = Kind::kFloats;
  a.floats = std::move(v);
  return a;
}
Attribute Attribute::Strings(std::vector<std::string> v) {
  Attribute a;
  a.kind = Kind::kStrings;
  a.strings = std::move(v);
  return a;
}

Attribute Attribute::GraphValue(std::shared_ptr<const Graph> v) {
  Attribute a;
  a.kind = Kind::kGraph;
  a.g = std::move(v);
  return a;
}

bool Attribute::operator==(const Attribute& o) const {
  if (kind != o.kind) return false;
  switch (kind) {
    case Kind::kGraph:
      return g == o.g;
    case Kind::kInt:
      return i == o.i;
    case Kind::kFloat:
      return f == o.f || (f != f && o.f != o.f);
    case Kind::kString:
      return s == o.s;
    case Kind::kInts:
      return ints == o.ints;
    case Kind::kFloats:
      return floats == o.floats;
    case Kind::kStrings:
      return strings == o.strings;
    case Kind::kTensor:
      return t.dtype() == o.t.dtype() && t.shape() == o.t.shape() &&
             (t.nbytes() == 0 || std::memcmp(t.raw(), o.t.raw(), t.nbytes()) == 0);
  }
  return false;
}

Value* Node::Captured(const std::string& name) const {
  auto it = std::find(captures.begin(), captures.end(), name);
  if (it == captures.end()) return nullptr;
  return inputs[inputs.size() - captures.size() + static_cast<size_t>(it - captures.begin())];
}

const Attribute* Node::FindAttr(const std::string& key) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? nullptr : &it->second;
}

int64_t Node::GetInt(const std::string& key, int64_t dflt) const {
  const Attribute* a = FindAttr(key);
  return a && a->kind == Attribute::Kind::kInt ? a->i : dflt;
}
float Node::GetFloat(const std::string& key, float dflt) const {
  const Attribute* a = FindAttr(key);
  if (a && a->kind == Attribute::Kind::kFloat) return a->f;
  if (a && a->kind == Attribute::Kind::kInt) return static_cast<float>(a->i);
  return dflt;
}
std::string Node::GetString(const std::string& key, const std::string& dflt) const {
  const Attribute* a = FindAttr(key);
  return a && a->kind == Attribute::Kind::kString ? a->s : dflt;
}
std::vector<int64_t> Node::GetInts(const std::string& key, std::vector<int64_t> dflt) const {
  const Attribute* a = FindAttr(key);
  return a && a->kind == Attribute::Kind::kInts ? a->ints : dflt;
}
std::vector<float> Node::GetFloats(const std::string& key, std::vector<float> dflt) const {
  const Attribute* a = FindAttr(key);
  return a && a->kind == Attribute::Kind::kFloats ? a->floats : dflt;
}

std::string Node::Describe() const {
  std::string s = domain.empty() ? op_type : domain + "." + op_type;
  s += " '" + name + "'";
  if (opset > 0) s += " (opset " + std::to_string(opset) + ")";
  return s;
}

Value* Graph::AddValue(const std::string& name) {
  if (by_name_.count(name)) return nullptr;
  auto v = std::make_unique<Value>();
  v->name = name;
  Value* raw = v.get();
  values_.push_back(std::move(v));
  by_name_[name] = raw;
  return raw;
}

Value* Graph::FindValue(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

Value* Graph::NewValue(const std::string& hint) {
  std::string base = hint.empty() ? "v" : hint;
  while (true) {
    std::string candidate = base + "__" + std::to_string(next_id_++);
    if (!by_name_.count(candidate)) return AddValue(candidate);
  }
}

Value* Graph::AddConstant(const std::string& name_hint, Tensor t) {
  Value* v = FindValue(name_hint) ? NewValue(name_hint) : AddValue(name_hint);
  v->dtype = t.dtype();
  v->shape = ToShape(t.shape());
  v->constant = std::move(t);
  return v;
}

Node* Graph::AddNode(std::string op_type, std::vector<Value*> inputs, std::vector<Value*> outputs,
                     std::string name) {
  auto n = std::make_unique<Node>();
  n->op_type = std::move(op_type);
  n->inputs = std::move(inputs);
  n->outputs = std::move(outputs);
  n->name = name.empty() ? n->op_type + "_" + std::to_string(next_id_++) : std::move(name);
  n->opset = opsets.count(kOnnxDomain) ? opsets.at(kOnnxDomain) : 0;
  return InsertNode(nullptr, std::move(n));
}

Node* Graph::InsertNode(Node* before, std::unique_ptr<Node> node) {
  Node* raw = node.get();
  for (Value* out : raw->outputs) {
    if (out) out->producer = raw;
  }
  auto it = nodes_.end();
  if (before) {
    it = std::find_if(nodes_.begin(), nodes_.end(),
                      [before](const std::unique_ptr<Node>& n) { return n.get() == before; });
  }
  nodes_.insert(it, std::move(node));
  return raw;
}

void Graph::RemoveNode(Node* node) {
  for (Value* out : node->outputs) {
    if (out && out->producer == node) out->producer = nullptr;
  }
  nodes_.erase(std::remove_if(nodes_.begin(), nodes_.end(),
                              [node](const std::unique_ptr<Node>& n) { return n.get() == node; }),
               nodes_.end());
}

std::vector<Node*> Graph::Consumers(const Value* v) const {
  std::vector<Node*> out;
  for (const auto& n : nodes_) {
    for (Value* in : n->inputs) {
      if (in == v) {
        out.push_back(n.get());
        break;
      }
    }
  }
  return out;
}

bool Graph::IsGraphOutput(const Value* v) const {
  return std::find(outputs.begin(), outputs.end(), v) != outputs.end();
}

void Graph::ReplaceAllUses(Value* from, Value* to) {
  for (auto& n : nodes_) {
    for (Value*& in : n->inputs) {
      if (in == from) in = to;
    }
  }
  for (Value*& out : outputs) {
    if (out == from) out = to;
  }
}

void Graph::PruneUnusedValues() {
  // A flat set: every pass that changed the graph calls this over all of its values.
  absl::flat_hash_set<const Value*> used(inputs.begin(), inputs.end());
  used.reserve(values_.size());
  used.insert(outputs.begin(), outputs.end());
  for (const auto& n : nodes_) {
    used.insert(n->inputs.begin(), n->inputs.end());
    used.insert(n->outputs.begin(), n->outputs.end());
  }
  std::vector<std::unique_ptr<Value>> kept;
  for (auto& v : values_) {
    if (used.count(v.get())) {
      kept.push_back(std::move(v));
    } else {
      by_name_.erase(v->name);
    }
  }
  values_ = std::move(kept);
}

bool Graph::TopologicalSort() {
  std::unordered_map<const Node*, int> pending;
  std::unordered_map<const Value*, std::vector<Node*>> users;
  for (const auto& n : nodes_) {
    int deps = 0;
    std::unordered_set<const Value*> seen;
    for (Value* in : n->inputs) {
      if (in && in->producer && seen.insert(in).second) {
        ++deps;
        users[in].push_back(n.get());
      }
    }
    pending[n.get()] = deps;
  }
  std::deque<Node*> ready;
  for (const auto& n : nodes_) {
    if (pending[n.get()] == 0) ready.push_back(n.get());
  }
  std::vector<Node*> order;
  while (!ready.empty()) {
    Node* n = ready.front();
    ready.pop_front();
    order.push_back(n);
    for (Value* out : n->outputs) {
      if (!out) continue;
      for (Node* u : users[out]) {
        if (--pending[u] == 0) ready.push_back(u);
      }
    }
  }
  if (order.size() != nodes_.size()) return false;
  std::unordered_map<const Node*, std::unique_ptr<Node>> owned;
  for (auto& n : nodes_) owned[n.get()] = std::move(n);
  nodes_.clear();
  for (Node* n : order) nodes_.push_back(std::move(owned[n]));
  return true;
}

std::unique_ptr<Graph> Graph::Clone() const {
  auto g = std::make_unique<Graph>();
  g->name = name;
  g->opsets = opsets;
  g->next_id_ = next_id_;
  std::unordered_map<const Value*, Value*> map;
  for (const auto& v : values_) {
    Value* c = g->AddValue(v->name);
    c->dtype = v->dtype;
    c->shape = v->shape;
    c->constant = v->constant;
    map[v.get()] = c;
  }
  auto mapped = [&map](Value* v) { return v ? map.at(v) : nullptr; };
  for (Value* v : inputs) g->inputs.push_back(mapped(v));
  for (Value* v : outputs) g->outputs.push_back(mapped(v));
  for (Value* v : captures) g->captures.push_back(mapped(v));
  for (const auto& n : nodes_) {
    auto c = std::make_unique<Node>();
    c->name = n->name;
    c->op_type = n->op_type;
    c->domain = n->domain;
    c->opset = n->opset;
    c->attrs = n->attrs;
    c->captures = n->captures;
    for (Value* in : n->inputs) c->inputs.push_back(mapped(in));
    for (Value* out : n->outputs) c->outputs.push_back(mapped(out));
    g->InsertNode(nullptr, std::move(c));
  }
  return g;
}

}  // namespace kiln
