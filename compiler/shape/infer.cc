#include "compiler/shape/infer.h"

#include "compiler/shape/dim_expr.h"
#include "ir/graph_edit.h"
#include "ops/evaluate.h"

namespace kiln::shape {

DType InferContext::input_dtype(size_t i) const {
  Value* v = node_.input(i);
  return v ? v->dtype : DType::kUndefined;
}

std::optional<Shape> InferContext::input_shape(size_t i) const {
  Value* v = node_.input(i);
  if (!v) return std::nullopt;
  return v->shape;
}

std::optional<Shape> InferContext::input_shape_or_unknown_output(size_t i) {
  std::optional<Shape> s = input_shape(i);
  if (!s) set_output(0, input_dtype(i), std::nullopt);
  return s;
}

const Tensor* InferContext::input_constant(size_t i) const {
  Value* v = node_.input(i);
  return v && v->constant ? &*v->constant : nullptr;
}

void InferContext::set_output(size_t i, DType dtype, std::optional<Shape> shape) {
  Value* v = node_.output(i);
  if (!v) return;
  v->dtype = dtype;
  v->shape = std::move(shape);
}

void InferContext::set_output_constant(size_t i, Tensor value) {
  Value* v = node_.output(i);
  if (!v) return;
  v->dtype = value.dtype();
  v->shape = ToShape(value.shape());
  v->constant = std::move(value);
}

absl::Status InferContext::Invalid(const std::string& what) const {
  return absl::InvalidArgumentError(node_.Describe() + ": " + what);
}

absl::Status InferContext::Unsupported(const std::string& what) const {
  return absl::UnimplementedError(node_.Describe() + ": " + what);
}

void RuleRegistry::Register(const std::string& domain, const std::string& op_type, InferFn fn) {
  rules_[{domain, op_type}] = std::move(fn);
}

const InferFn* RuleRegistry::Find(const std::string& domain, const std::string& op_type) const {
  auto it = rules_.find({domain, op_type});
  return it == rules_.end() ? nullptr : &it->second;
}

const RuleRegistry& RuleRegistry::Default() {
  static const RuleRegistry* registry = [] {
    auto* r = new RuleRegistry();
    RegisterElementwiseRules(*r);
    RegisterNnRules(*r);
    RegisterReductionRules(*r);
    RegisterTensorRules(*r);
    RegisterKilnRules(*r);
    RegisterControlFlowRules(*r);
    return r;
  }();
  return *registry;
}

namespace {

bool AllInputsConstant(const Node& node) {
  bool any = false;
  for (Value* in : node.inputs) {
    if (!in) continue;
    if (!in->constant) return false;
    any = true;
  }
  return any || node.inputs.empty();
}

// Evaluates a node whose inputs are all constant, when its outputs are small.
absl::Status FoldIfSmall(Node& node, const InferOptions& options) {
  for (Value* out : node.outputs) {
    if (!out) continue;
    if (!out->shape || !IsStatic(*out->shape) ||
        NumElements(StaticDims(*out->shape)) > options.max_fold_elements) {
      return absl::OkStatus();
    }
  }
  // A random generator is never frozen into a constant, whatever its inputs.
  if (!ref::IsDeterministic(node)) return absl::OkStatus();
  absl::StatusOr<std::vector<Tensor>> result = ref::EvaluateConstantNode(node);
  if (!result.ok()) {
    // An unsupported kernel only means no folding; a real input error still surfaces.
    return absl::IsUnimplemented(result.status()) ? absl::OkStatus() : result.status();
  }
  for (size_t i = 0; i < node.outputs.size() && i < result->size(); ++i) {
    Value* out = node.outputs[i];
    if (out && (*result)[i].defined()) {
      out->shape = ToShape((*result)[i].shape());
      out->constant = std::move((*result)[i]);
    }
  }
  return absl::OkStatus();
}

// A DequantizeLinear of constants stays a node: the int8 lowering (fuse_qdq) needs the
// quantized weights and their scales, and folding weights is the optimizer's job.
bool KeepsQuantizedOperand(const Node& node) {
  return node.domain.empty() && node.op_type == "DequantizeLinear";
}

bool AllOutputsConstant(const Node& node) {
  for (Value* out : node.outputs) {
    if (out && !out->constant) return false;
  }
  return true;
}

absl::Status CheckDeclared(const Node& node, const Value* out, DType declared) {
  if (declared == DType::kUndefined || out->dtype == DType::kUndefined ||
      declared == out->dtype) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(node.Describe() + ": output '" + out->name +
                                    "' is declared " + DTypeName(declared) + " but computes " +
                                    DTypeName(out->dtype));
}

}  // namespace

absl::Status InferShapes(Graph& graph, const InferOptions& options) {
  const RuleRegistry& rules = RuleRegistry::Default();
  std::vector<Node*> folded;
  for (const auto& node_ptr : graph.nodes()) {
    Node& node = *node_ptr;
    const InferFn* rule = rules.Find(node.domain, node.op_type);
    if (!rule) {
      if (options.allow_unknown_ops) continue;
      return absl::UnimplementedError(node.Describe() + ": no shape inference rule");
    }
    std::vector<DType> declared;
    for (Value* out : node.outputs) declared.push_back(out ? out->dtype : DType::kUndefined);
    InferContext ctx(graph, node);
    RETURN_IF_ERROR((*rule)(ctx));
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      if (node.outputs[i]) RETURN_IF_ERROR(CheckDeclared(node, node.outputs[i], declared[i]));
    }
    if (AllInputsConstant(node) && !AllOutputsConstant(node) && !KeepsQuantizedOperand(node)) {
      RETURN_IF_ERROR(FoldIfSmall(node, options));
    }
    if (AllOutputsConstant(node)) folded.push_back(&node);
  }
  RemoveNodes(graph, folded);
  return absl::OkStatus();
}

absl::Status Specialize(Graph& graph, int64_t batch,
                        const std::map<std::string, int64_t>& bindings) {
  if (batch <= 0) return absl::InvalidArgumentError("batch size must be positive");
  std::map<std::string, int64_t> symbols = bindings;
  for (Value* in : graph.inputs) {
    if (!in->shape || in->shape->empty()) continue;
    Dim& d0 = (*in->shape)[0];
    if (!d0.known() && !d0.param.empty() && !symbols.count(d0.param)) symbols[d0.param] = batch;
  }
  for (Value* in : graph.inputs) {
    if (!in->shape) continue;
    for (size_t i = 0; i < in->shape->size(); ++i) {
      Dim& d = (*in->shape)[i];
      if (d.known()) continue;
      auto it = symbols.find(d.param);
      if (it != symbols.end()) {
        d = Dim(it->second);
      } else if (i == 0) {
        d = Dim(batch);
      }
    }
  }
  BindDimExprs(graph, symbols);  // "past + 1" follows "past"
  // Intermediate shapes were computed from the symbolic inputs: recompute from scratch.
  for (const auto& n : graph.nodes()) {
    for (Value* out : n->outputs) {
      if (out && !out->constant) out->shape.reset();
    }
  }
  return InferShapes(graph);
}

}  // namespace kiln::shape
