#include "ops/interpreter.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <unordered_map>

#include "base/memory_budget.h"
#include "base/stop.h"
#include "ops/evaluate.h"
#include "ops/run_observed.h"

namespace kiln::ref {

void KernelRegistry::Register(const std::string& domain, const std::string& op_type, KernelFn fn) {
  kernels_[{domain, op_type}] = std::move(fn);
}

const KernelFn* KernelRegistry::Find(const std::string& domain, const std::string& op_type) const {
  auto it = kernels_.find({domain, op_type});
  return it == kernels_.end() ? nullptr : &it->second;
}

std::vector<std::string> KernelRegistry::OpTypes(const std::string& domain) const {
  std::vector<std::string> ops;
  for (const auto& [key, fn] : kernels_) {
    if (key.first == domain) ops.push_back(key.second);
  }
  return ops;
}

const KernelRegistry& KernelRegistry::Default() {
  static const KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    RegisterElementwiseKernels(*r);
    RegisterNnKernels(*r);
    RegisterReductionKernels(*r);
    RegisterTensorKernels(*r);
    RegisterKilnKernels(*r);
    RegisterControlFlowKernels(*r);
    return r;
  }();
  return *registry;
}

namespace {

// What a kernel may hold beside its output tensors while it runs: the reference widens its
// operands and results to double (8 bytes an element) in plain vectors, which no tensor
// account sees. Reserved before the kernel runs inside a MemoryScope (a constant fold or a
// warm-up check of a build, a request's fallback), so a node whose working set passes the
// budget is refused before it allocates.
int64_t ScratchEstimate(const Node& node, const KernelInputs& inputs) {
  double elements = 0;
  for (const Tensor* t : inputs) {
    if (t) elements += static_cast<double>(t->numel());
  }
  for (const Value* out : node.outputs) {
    if (!out || !out->shape) continue;
    double n = 1;
    for (const Dim& d : *out->shape) n *= d.known() ? static_cast<double>(d.value) : 1.0;
    elements += n;
  }
  return elements * 8 > 9e18 ? std::numeric_limits<int64_t>::max()
                             : static_cast<int64_t>(elements * 8);
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> RunNode(const Node& node, const KernelInputs& inputs) {
  const KernelFn* fn = KernelRegistry::Default().Find(node.domain, node.op_type);
  if (!fn) return absl::UnimplementedError(node.Describe() + ": operator is not supported");
  MemoryReservation scratch;
  if (const auto* account = CurrentMemoryAccount()) {
    auto reserved = MemoryReservation::Make(*account, ScratchEstimate(node, inputs));
    if (!reserved.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat(node.Describe(), ": ", reserved.status().message()));
    }
    scratch = std::move(*reserved);
  }
  auto run = CatchOutOfMemory([&] { return (*fn)(node, inputs); });
  if (!run.ok() && run.status().code() == absl::StatusCode::kResourceExhausted) {
    return absl::ResourceExhaustedError(
        absl::StrCat(node.Describe(), ": ", run.status().message()));
  }
  ASSIGN_OR_RETURN(std::vector<Tensor> outs, std::move(run));
  if (outs.size() < node.outputs.size()) outs.resize(node.outputs.size());
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (node.outputs[i] && !outs[i].defined()) {
      return absl::InternalError(node.Describe() + ": kernel produced no output " +
                                 std::to_string(i));
    }
  }
  return outs;
}

absl::Status CheckSupported(const Graph& graph) {
  for (const auto& node : graph.nodes()) {
    if (!KernelRegistry::Default().Find(node->domain, node->op_type)) {
      return absl::UnimplementedError(node->Describe() + ": operator is not supported");
    }
    for (const auto& [name, attr] : node->attrs) {
      if (attr.kind != Attribute::Kind::kGraph || !attr.g) continue;
      absl::Status st = CheckSupported(*attr.g);
      if (!st.ok())
        return absl::Status(st.code(),
                            node->Describe() + " " + name + ": " + std::string(st.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckInput(const Value& input, const Tensor& t) {
  if (t.dtype() != input.dtype) {
    return absl::InvalidArgumentError("input '" + input.name + "' must be " +
                                      DTypeName(input.dtype) + ", got " + DTypeName(t.dtype()));
  }
  if (!input.shape) return absl::OkStatus();
  const Shape& s = *input.shape;
  bool ok = static_cast<int64_t>(s.size()) == t.rank();
  for (size_t i = 0; ok && i < s.size(); ++i) {
    ok = !s[i].known() || s[i].value == t.dim(static_cast<int64_t>(i));
  }
  if (!ok) {
    return absl::InvalidArgumentError("input '" + input.name + "' must have shape " +
                                      ShapeToString(s) + ", got " + ShapeToString(t.shape()));
  }
  return absl::OkStatus();
}

namespace {

// Index of the last node that reads each value, so intermediates are freed early.
std::unordered_map<const Value*, size_t> LastUses(const Graph& graph) {
  std::unordered_map<const Value*, size_t> last;
  const auto& nodes = graph.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (Value* in : nodes[i]->inputs) {
      if (in) last[in] = i;
    }
  }
  for (Value* out : graph.outputs) last[out] = nodes.size();
  return last;
}

}  // namespace

namespace {

using Env = std::unordered_map<const Value*, Tensor>;

// A node's outputs: from `constants` when every input is a graph constant and the node was
// kept there, else computed (and kept when it qualifies, see Run).
absl::StatusOr<std::vector<Tensor>> RunMaybeKept(const Node& node, const KernelInputs& kin,
                                                 ConstantResults* constants) {
  size_t in_bytes = 0;
  bool all_constant = constants != nullptr && IsDeterministic(node);
  for (size_t i = 0; all_constant && i < node.inputs.size(); ++i) {
    const Value* in = node.inputs[i];
    all_constant = !in || in->constant;
    if (kin[i]) in_bytes += kin[i]->nbytes();
  }
  if (!all_constant || in_bytes < kMinConstantBytes) return RunNode(node, kin);
  if (std::optional<std::vector<Tensor>> kept = constants->Find(node, kin)) return std::move(*kept);
  ASSIGN_OR_RETURN(std::vector<Tensor> outs, RunNode(node, kin));
  size_t out_bytes = 0;
  for (const Tensor& t : outs) out_bytes += t.nbytes();
  if (out_bytes <= in_bytes) constants->Store(node, kin, outs);
  return outs;
}

// Runs the nodes of `graph` on `env` (its inputs and captures already bound); returns the
// graph's outputs in order. Intermediates are released after their last use.
absl::StatusOr<std::vector<Tensor>> Execute(const Graph& graph, Env& env,
                                            const ValueObserver* observe = nullptr,
                                            ConstantResults* constants = nullptr) {
  auto last = LastUses(graph);
  const auto& nodes = graph.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& node = *nodes[i];
    KernelInputs kin;
    for (Value* in : node.inputs) {
      if (!in) {
        kin.push_back(nullptr);
      } else if (in->constant) {
        kin.push_back(&*in->constant);
      } else {
        auto it = env.find(in);
        if (it == env.end()) {
          return absl::InternalError(node.Describe() + ": input '" + in->name +
                                     "' was not computed");
        }
        kin.push_back(&it->second);
      }
    }
    RETURN_IF_ERROR(CheckStop());  // a warm-up check may be stopped between nodes
    ASSIGN_OR_RETURN(std::vector<Tensor> outs, RunMaybeKept(node, kin, constants));
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      if (!node.outputs[k]) continue;
      if (observe) (*observe)(*node.outputs[k], outs[k]);
      env[node.outputs[k]] = std::move(outs[k]);
    }
    for (Value* in : node.inputs) {
      if (in && !in->constant && last[in] == i) env.erase(in);
    }
  }
  std::vector<Tensor> result;
  for (Value* out : graph.outputs) {
    if (out->constant) {
      result.push_back(*out->constant);
      continue;
    }
    auto it = env.find(out);
    if (it == env.end()) return absl::InternalError("output '" + out->name + "' not computed");
    result.push_back(it->second);
  }
  return result;
}

absl::StatusOr<TensorMap> RunObservedWith(const Graph& graph, const TensorMap& inputs,
                                          const ValueObserver& observe,
                                          ConstantResults* constants) {
  RETURN_IF_ERROR(CheckSupported(graph));
  Env env;
  for (Value* in : graph.inputs) {
    auto it = inputs.find(in->name);
    if (it == inputs.end()) {
      return absl::InvalidArgumentError("missing input '" + in->name + "'");
    }
    RETURN_IF_ERROR(CheckInput(*in, it->second));
    if (observe) observe(*in, it->second);
    env[in] = it->second;
  }
  for (const auto& [name, t] : inputs) {
    Value* v = graph.FindValue(name);
    if (!v || (std::find(graph.inputs.begin(), graph.inputs.end(), v) == graph.inputs.end())) {
      return absl::InvalidArgumentError("unknown input '" + name + "'");
    }
  }
  ASSIGN_OR_RETURN(std::vector<Tensor> outs,
                   Execute(graph, env, observe ? &observe : nullptr, constants));
  TensorMap result;
  for (size_t i = 0; i < graph.outputs.size(); ++i) result[graph.outputs[i]->name] = outs[i];
  return result;
}

}  // namespace

absl::StatusOr<TensorMap> Run(const Graph& graph, const TensorMap& inputs) {
  return RunObserved(graph, inputs, nullptr);
}

absl::StatusOr<TensorMap> Run(const Graph& graph, const TensorMap& inputs,
                              ConstantResults* constants) {
  return RunObservedWith(graph, inputs, nullptr, constants);
}

absl::StatusOr<TensorMap> RunObserved(const Graph& graph, const TensorMap& inputs,
                                      const ValueObserver& observe) {
  return RunObservedWith(graph, inputs, observe, nullptr);
}

absl::StatusOr<std::vector<Tensor>> RunBody(const Graph& body, const std::vector<Tensor>& args,
                                            const TensorMap& captured) {
  if (args.size() != body.inputs.size()) {
    return absl::InvalidArgumentError("the body takes " + std::to_string(body.inputs.size()) +
                                      " inputs, " + std::to_string(args.size()) + " given");
  }
  Env env;
  for (size_t i = 0; i < args.size(); ++i) {
    const Value* in = body.inputs[i];
    if (in->dtype != DType::kUndefined && in->dtype != args[i].dtype()) {
      return absl::InvalidArgumentError("body input '" + in->name + "' must be " +
                                        DTypeName(in->dtype) + ", got " +
                                        DTypeName(args[i].dtype()));
    }
    env[in] = args[i];
  }
  for (const Value* c : body.captures) {
    auto it = captured.find(c->name);
    if (it == captured.end()) return absl::InternalError("capture '" + c->name + "' is unbound");
    env[c] = it->second;
  }
  return Execute(body, env);
}

}  // namespace kiln::ref
