#include "compiler/passes/epilogue_match.h"

#include <algorithm>
#include <cfloat>

#include "ir/graph_edit.h"

namespace kiln::passes {
namespace {

bool IsOnnx(const Node* n, const char* op) { return n && n->domain.empty() && n->op_type == op; }

std::optional<float> ScalarConstant(const Value* v) {
  if (!v || !v->constant || v->constant->numel() != 1) return std::nullopt;
  return static_cast<float>(v->constant->GetDouble(0));
}

// An activation node consuming v alone, as an epilogue step.
std::optional<kiln_ops::EpilogueStep> ActivationStep(const Node* n) {
  if (!n || !n->domain.empty()) return std::nullopt;
  kiln_ops::EpilogueStep s;
  s.op = n->op_type;
  if (s.op == "Relu" || s.op == "Sigmoid" || s.op == "Tanh" || s.op == "HardSwish") return s;
  if (s.op == "LeakyRelu") {
    s.alpha = n->GetFloat("alpha", 0.01f);
    return s;
  }
  if (s.op == "HardSigmoid") {
    s.alpha = n->GetFloat("alpha", 0.2f);
    s.beta = n->GetFloat("beta", 0.5f);
    return s;
  }
  if (s.op == "Gelu") {
    std::string approx = n->GetString("approximate", "none");
    if (approx != "none" && approx != "tanh") return std::nullopt;
    if (approx == "tanh") s.op = "GeluTanh";
    return s;
  }
  if (s.op == "Clip") {
    std::optional<float> lo = n->input(1) ? ScalarConstant(n->input(1)) : -FLT_MAX;
    std::optional<float> hi = n->input(2) ? ScalarConstant(n->input(2)) : FLT_MAX;
    if (!lo || !hi) return std::nullopt;
    s.alpha = *lo;
    s.beta = *hi;
    return s;
  }
  return std::nullopt;
}

// The per-channel vector of a constant that broadcasts along the channel axis only.
std::optional<Tensor> ChannelBias(const Value* c, const Value* out, const EpilogueOptions& o) {
  if (!c || !c->constant || !IsFloatDType(c->dtype) || c->dtype != out->dtype) return std::nullopt;
  if (!out->shape || o.channels <= 0) return std::nullopt;
  const auto& dims = c->constant->shape();
  const int64_t rank = static_cast<int64_t>(out->shape->size());
  const int64_t axis = o.channel_axis < 0 ? rank + o.channel_axis : o.channel_axis;
  if (static_cast<int64_t>(dims.size()) > rank) return std::nullopt;
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t out_axis = rank - static_cast<int64_t>(dims.size()) + static_cast<int64_t>(i);
    if (dims[i] != 1 && !(out_axis == axis && dims[i] == o.channels)) return std::nullopt;
  }
  Tensor bias(c->dtype, {o.channels});
  for (int64_t k = 0; k < o.channels; ++k) {
    bias.SetDouble(k, c->constant->GetDouble(c->constant->numel() == 1 ? 0 : k));
  }
  return bias;
}

bool SameStaticShape(const Value* a, const Value* b) {
  return a->shape && b->shape && IsStatic(*a->shape) && *a->shape == *b->shape &&
         a->dtype == b->dtype;
}

// The values a node reads that a match may ask the readers of, each once (Consumers lists a
// node once per value). Constants are left out: a match only follows node outputs, and a
// weight shared by every Conv of a model would make each fusion's update of its reader list
// a walk of all of them.
std::vector<const Value*> IndexedInputs(const Node& n) {
  std::vector<const Value*> ins;
  for (const Value* in : n.inputs) {
    if (in && !in->constant && std::find(ins.begin(), ins.end(), in) == ins.end()) {
      ins.push_back(in);
    }
  }
  return ins;
}

}  // namespace

EpilogueFuser::EpilogueFuser(Graph& graph)
    : graph_(graph), outputs_(graph.outputs.begin(), graph.outputs.end()) {
  const auto& nodes = graph.nodes();
  position_.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    position_[nodes[i].get()] = i;
    for (const Value* in : IndexedInputs(*nodes[i])) readers_[in].push_back(nodes[i].get());
  }
}

const std::vector<Node*>& EpilogueFuser::Readers(const Value* v) const {
  static const std::vector<Node*> kNone;
  auto it = readers_.find(v);
  return it == readers_.end() ? kNone : it->second;
}

Node* EpilogueFuser::SoleConsumer(const Value* v) const {
  if (!v || outputs_.count(v)) return nullptr;
  const std::vector<Node*>& users = Readers(v);
  return users.size() == 1 ? users[0] : nullptr;
}

// Recognizes x * sigmoid(x) where x = v: v's consumers are exactly {Sigmoid, Mul}.
Node* EpilogueFuser::MatchSilu(const Value* v) const {
  if (outputs_.count(v)) return nullptr;
  const std::vector<Node*>& users = Readers(v);
  if (users.size() != 2) return nullptr;
  Node* sig = IsOnnx(users[0], "Sigmoid") ? users[0] : users[1];
  Node* mul = sig == users[0] ? users[1] : users[0];
  if (!IsOnnx(sig, "Sigmoid") || !IsOnnx(mul, "Mul")) return nullptr;
  Node* after_sig = SoleConsumer(sig->output(0));
  if (after_sig != mul) return nullptr;
  const bool operands_ok = (mul->input(0) == v && mul->input(1) == sig->output(0)) ||
                           (mul->input(1) == v && mul->input(0) == sig->output(0));
  return operands_ok ? mul : nullptr;
}

// Tries to consume one activation after `cur`; advances cur on success.
bool EpilogueFuser::TakeActivation(Value*& cur, EpilogueMatch& m) const {
  if (Node* mul = MatchSilu(cur)) {
    const std::vector<Node*>& users = Readers(cur);
    Node* sig = users[0] == mul ? users[1] : users[0];
    m.swallowed.push_back(sig);
    m.swallowed.push_back(mul);
    m.steps.push_back({"SiLU", 0.0f, 0.0f});
    cur = mul->output(0);
    return true;
  }
  Node* n = SoleConsumer(cur);
  std::optional<kiln_ops::EpilogueStep> step = ActivationStep(n);
  if (!n || !step || n->input(0) != cur) return false;
  m.swallowed.push_back(n);
  m.steps.push_back(*step);
  cur = n->output(0);
  return true;
}

EpilogueMatch EpilogueFuser::Match(Value* start, const EpilogueOptions& options) const {
  EpilogueMatch m;
  Value* cur = start;
  Node* n = SoleConsumer(cur);
  if (options.allow_bias && IsOnnx(n, "Add")) {
    Value* other = n->input(0) == cur ? n->input(1) : n->input(0);
    if (std::optional<Tensor> b = ChannelBias(other, n->output(0), options)) {
      m.bias = std::move(b);
      m.swallowed.push_back(n);
      cur = n->output(0);
    }
  }
  TakeActivation(cur, m);
  n = SoleConsumer(cur);
  if (IsOnnx(n, "Add") && n->inputs.size() == 2) {
    Value* other = n->input(0) == cur ? n->input(1) : n->input(0);
    if (other != cur && !other->constant && SameStaticShape(other, cur) &&
        SameStaticShape(n->output(0), cur)) {
      m.swallowed.push_back(n);
      m.steps.push_back({"Add", 0.0f, 0.0f});
      m.residuals.push_back(other);
      cur = n->output(0);
      TakeActivation(cur, m);
    }
  }
  m.output = cur;
  return m;
}

void EpilogueFuser::Replace(Node* first, const EpilogueMatch& m, std::unique_ptr<Node> fused) {
  Node* last = m.swallowed.empty() ? first : m.swallowed.back();
  fused->outputs = {m.output};
  Node* raw = fused.get();
  // The readers as the graph will have them: the fused node sits where `last` was.
  std::vector<Node*> gone = m.swallowed;
  gone.push_back(first);
  for (Node* g : gone) {
    for (const Value* in : IndexedInputs(*g)) {
      std::vector<Node*>& users = readers_[in];
      users.erase(std::remove(users.begin(), users.end(), g), users.end());
    }
  }
  const size_t at = position_.at(last);
  position_[raw] = at;
  for (const Value* in : IndexedInputs(*raw)) {
    std::vector<Node*>& users = readers_[in];
    auto pos = std::lower_bound(users.begin(), users.end(), at,
                                [this](Node* u, size_t p) { return position_.at(u) < p; });
    users.insert(pos, raw);
  }
  m.output->producer = raw;
  inserts_.emplace_back(last, std::move(fused));
  removed_.insert(removed_.end(), gone.begin(), gone.end());
}

bool EpilogueFuser::Finish() {
  if (inserts_.empty()) return false;
  std::vector<Node*> fused;
  for (const auto& i : inserts_) fused.push_back(i.second.get());
  InsertNodes(graph_, std::move(inserts_));
  RemoveNodes(graph_, removed_);
  for (Node* f : fused) f->outputs[0]->producer = f;  // RemoveNodes left them alone; be sure
  inserts_.clear();
  removed_.clear();
  return true;
}

}  // namespace kiln::passes
