#include "compiler/passes/inline_constant_if.h"

#include <algorithm>
#include <memory>
#include <set>
#include <unordered_map>

#include "compiler/shape/infer.h"

namespace kiln::passes {
namespace {

// Every value the branch reads is a capture the node supplies, a constant, or the output of
// an earlier node of the branch; and so is every branch output.
bool Closed(const Node& n, const Graph& body) {
  std::set<const Value*> known;
  for (const Value* c : body.captures) {
    if (!n.Captured(c->name)) return false;
    known.insert(c);
  }
  auto readable = [&known](const Value* v) { return known.count(v) || v->is_constant(); };
  for (const auto& b : body.nodes()) {
    for (const Value* in : b->inputs) {
      if (in && !readable(in)) return false;
    }
    for (const Value* out : b->outputs) {
      if (out) known.insert(out);
    }
  }
  return std::all_of(body.outputs.begin(), body.outputs.end(),
                     [&](const Value* o) { return o && readable(o); });
}

// The branch an If with a constant one-element condition takes, when it can be inlined;
// nullptr otherwise.
std::shared_ptr<const Graph> TakenBranch(const Node& n) {
  if (!n.domain.empty() || n.op_type != "If" || n.captures.size() >= n.inputs.size()) {
    return nullptr;
  }
  const Value* cond = n.input(0);
  if (!cond || !cond->is_constant() || cond->constant->numel() != 1) return nullptr;
  const Attribute* a =
      n.FindAttr(cond->constant->GetDouble(0) != 0.0 ? "then_branch" : "else_branch");
  if (!a || a->kind != Attribute::Kind::kGraph || !a->g) return nullptr;
  const Graph& body = *a->g;
  if (!body.inputs.empty() || body.outputs.size() != n.outputs.size() || !Closed(n, body)) {
    return nullptr;
  }
  return a->g;
}

// Maps the branch's values onto the enclosing graph's as its nodes are copied.
class Inliner {
 public:
  Inliner(Graph& graph, Node& node, const Graph& body) : g_(graph), n_(node), body_(body) {}

  // Copies the branch's nodes where `n_` is and removes `n_` (the branch is Closed).
  void Run() {
    MapCaptures();
    ClaimOutputs();
    std::vector<std::unique_ptr<Node>> copies;
    for (const auto& b : body_.nodes()) {
      auto c = std::make_unique<Node>(*b);
      c->name = b->name.empty() || n_.name.empty() ? b->name : n_.name + "/" + b->name;
      for (Value*& in : c->inputs) {
        if (in) in = Lookup(in);
      }
      for (Value*& out : c->outputs) {
        if (out) out = Produce(out);
      }
      copies.push_back(std::move(c));
    }
    for (auto& c : CopyOutputs()) copies.push_back(std::move(c));
    Node* before = NodeAfter(&n_);
    g_.RemoveNode(&n_);
    for (auto& c : copies) g_.InsertNode(before, std::move(c));
  }

 private:
  void MapCaptures() {
    for (const Value* c : body_.captures) map_[c] = n_.Captured(c->name);
  }

  // A branch output its own node produces, met for the first time, is written into the If's
  // output value itself.
  void ClaimOutputs() {
    for (size_t i = 0; i < body_.outputs.size(); ++i) {
      const Value* o = body_.outputs[i];
      if (o && o->producer && !map_.count(o) && n_.outputs[i]) {
        map_[o] = n_.outputs[i];
        claimed_.insert(i);
      }
    }
  }

  Value* Lookup(const Value* v) {
    auto it = map_.find(v);
    if (it != map_.end()) return it->second;
    Value* c = g_.AddConstant(v->name, *v->constant);
    map_[v] = c;
    return c;
  }

  Value* Produce(const Value* v) {
    auto it = map_.find(v);
    if (it != map_.end()) return it->second;
    Value* out = g_.FindValue(v->name) ? g_.NewValue(v->name) : g_.AddValue(v->name);
    out->dtype = v->dtype;
    out->shape = v->shape;
    map_[v] = out;
    return out;
  }

  // Identity copies for the If's outputs no branch node wrote.
  std::vector<std::unique_ptr<Node>> CopyOutputs() {
    std::vector<std::unique_ptr<Node>> tail;
    for (size_t i = 0; i < body_.outputs.size(); ++i) {
      if (claimed_.count(i) || !n_.outputs[i]) continue;
      auto id = std::make_unique<Node>();
      id->op_type = "Identity";
      id->name = n_.name + "/output" + std::to_string(i);
      id->opset = n_.opset;
      id->inputs = {Lookup(body_.outputs[i])};
      id->outputs = {n_.outputs[i]};
      tail.push_back(std::move(id));
    }
    return tail;
  }

  Node* NodeAfter(const Node* n) const {
    const auto& nodes = g_.nodes();
    for (size_t i = 0; i + 1 < nodes.size(); ++i) {
      if (nodes[i].get() == n) return nodes[i + 1].get();
    }
    return nullptr;
  }

  Graph& g_;
  Node& n_;
  const Graph& body_;
  std::unordered_map<const Value*, Value*> map_;
  std::set<size_t> claimed_;
};

}  // namespace

absl::StatusOr<bool> InlineConstantIf(Graph& graph) {
  bool changed = false;
  // An inlined branch may hold another constant If: look again until none is left.
  for (bool again = true; again;) {
    again = false;
    for (const auto& n : graph.nodes()) {
      // Held here: the node, and its attribute with it, goes when the inliner removes it.
      const std::shared_ptr<const Graph> body = TakenBranch(*n);
      if (!body) continue;
      Inliner(graph, *n, *body).Run();
      changed = again = true;
      break;  // the node list changed under the loop
    }
  }
  if (!changed) return false;
  graph.PruneUnusedValues();
  RETURN_IF_ERROR(shape::InferShapes(graph));
  return true;
}

}  // namespace kiln::passes
