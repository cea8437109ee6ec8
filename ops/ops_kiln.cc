// Reference kernels for Kiln's fused operators (domain ai.kiln). Each is, by definition, the
// composition of the ai.onnx reference kernels it replaced, so the oracle for a fused graph
// is exactly as trustworthy as the oracle for the original one.
#include <numeric>

#include "ir/kiln_ops.h"
#include "ops/interpreter.h"
#include "ops/kernel_util.h"

namespace kiln::ref {
namespace {

// A temporary ai.onnx node for one step of a fused operator.
Node StepNode(const Node& fused, const std::string& op, std::map<std::string, Attribute> attrs) {
  Node n;
  n.name = fused.name + "/" + op;
  n.op_type = op;
  n.opset = fused.opset;
  n.attrs = std::move(attrs);
  n.outputs = {nullptr};
  return n;
}

absl::StatusOr<Tensor> RunStep(const Node& fused, const std::string& op, const KernelInputs& inputs,
                               std::map<std::string, Attribute> attrs = {}) {
  Node n = StepNode(fused, op, std::move(attrs));
  n.outputs.assign(1, nullptr);
  ASSIGN_OR_RETURN(std::vector<Tensor> outs, RunNode(n, inputs));
  if (outs.empty() || !outs[0].defined()) return InvalidInput(fused, op + " produced nothing");
  return std::move(outs[0]);
}

absl::StatusOr<Tensor> ApplyActivation(const Node& fused, const kiln_ops::EpilogueStep& s,
                                       const Tensor& x) {
  const std::string& op = s.op;
  if (op == "Relu" || op == "Sigmoid" || op == "Tanh" || op == "HardSwish" || op == "Gelu") {
    return RunStep(fused, op, {&x});
  }
  if (op == "GeluTanh") {
    return RunStep(fused, "Gelu", {&x}, {{"approximate", Attribute::String("tanh")}});
  }
  if (op == "LeakyRelu") {
    return RunStep(fused, op, {&x}, {{"alpha", Attribute::Float(s.alpha)}});
  }
  if (op == "HardSigmoid") {
    return RunStep(fused, op, {&x},
                   {{"alpha", Attribute::Float(s.alpha)}, {"beta", Attribute::Float(s.beta)}});
  }
  if (op == "Clip") {
    Tensor lo = Tensor::Scalar(x.dtype(), s.alpha), hi = Tensor::Scalar(x.dtype(), s.beta);
    return RunStep(fused, op, {&x, &lo, &hi});
  }
  if (op == "SiLU") {
    ASSIGN_OR_RETURN(Tensor sig, RunStep(fused, "Sigmoid", {&x}));
    return RunStep(fused, "Mul", {&x, &sig});
  }
  return Unsupported(fused, "unknown epilogue step '" + op + "'");
}

// Applies the epilogue to y; residual inputs start at `first_residual`.
absl::StatusOr<Tensor> ApplyEpilogue(const Node& fused, Tensor y, const KernelInputs& in,
                                     size_t first_residual) {
  size_t next = first_residual;
  for (const auto& step : kiln_ops::ReadEpilogue(fused)) {
    if (step.op == "Add") {
      if (next >= in.size() || !in[next]) return InvalidInput(fused, "missing residual input");
      ASSIGN_OR_RETURN(y, RunStep(fused, "Add", {&y, in[next++]}));
    } else {
      ASSIGN_OR_RETURN(y, ApplyActivation(fused, step, y));
    }
  }
  return y;
}

std::map<std::string, Attribute> PrimaryAttrs(const Node& fused) {
  std::map<std::string, Attribute> attrs;
  for (const auto& [name, a] : fused.attrs) {
    if (!kiln_ops::IsEpilogueAttribute(name)) attrs[name] = a;
  }
  return attrs;
}

absl::StatusOr<std::vector<Tensor>> FusedConv(const Node& node, const KernelInputs& in) {
  KernelInputs conv_in(in.begin(), in.begin() + std::min<size_t>(3, in.size()));
  ASSIGN_OR_RETURN(Tensor y, RunStep(node, "Conv", conv_in, PrimaryAttrs(node)));
  ASSIGN_OR_RETURN(y, ApplyEpilogue(node, std::move(y), in, 3));
  return std::vector<Tensor>{std::move(y)};
}

// transA/transB: the operand with its last two dims swapped (any rank >= 2).
absl::StatusOr<Tensor> TransposeLast2(const Node& node, const Tensor& t) {
  if (t.rank() < 2) return InvalidInput(node, "transA/transB need operands of rank >= 2");
  std::vector<int64_t> perm(t.rank());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return RunStep(node, "Transpose", {&t}, {{"perm", Attribute::Ints(perm)}});
}

absl::StatusOr<std::vector<Tensor>> FusedMatMul(const Node& node, const KernelInputs& in) {
  ASSIGN_OR_RETURN(const Tensor* a, RequireInput(node, in, 0));
  ASSIGN_OR_RETURN(const Tensor* b, RequireInput(node, in, 1));
  Tensor ta, tb;
  if (node.GetInt("transA", 0)) {
    ASSIGN_OR_RETURN(ta, TransposeLast2(node, *a));
    a = &ta;
  }
  if (node.GetInt("transB", 0)) {
    ASSIGN_OR_RETURN(tb, TransposeLast2(node, *b));
    b = &tb;
  }
  ASSIGN_OR_RETURN(Tensor y, RunStep(node, "MatMul", {a, b}));
  const float alpha = node.GetFloat("alpha", 1.0f), beta = node.GetFloat("beta", 1.0f);
  if (alpha != 1.0f) {
    Tensor s = Tensor::Scalar(y.dtype(), alpha);
    ASSIGN_OR_RETURN(y, RunStep(node, "Mul", {&y, &s}));
  }
  if (in.size() > 2 && in[2]) {
    Tensor c = *in[2];
    if (beta != 1.0f) {
      Tensor s = Tensor::Scalar(c.dtype(), beta);
      ASSIGN_OR_RETURN(c, RunStep(node, "Mul", {&c, &s}));
    }
    ASSIGN_OR_RETURN(y, RunStep(node, "Add", {&y, &c}));
  }
  ASSIGN_OR_RETURN(y, ApplyEpilogue(node, std::move(y), in, 3));
  return std::vector<Tensor>{std::move(y)};
}

absl::StatusOr<std::vector<Tensor>> FusedElementwise(const Node& node, const KernelInputs& all) {
  ASSIGN_OR_RETURN(kiln_ops::Program program, kiln_ops::ReadProgram(node));
  // `concat_inputs`: the first K inputs are operand 0, their concatenation along the channels.
  const size_t concat = static_cast<size_t>(kiln_ops::ConcatInputs(node));
  KernelInputs in = all;
  Tensor joined;
  if (concat >= 2) {
    KernelInputs pieces(all.begin(), all.begin() + concat);
    for (const Tensor* t : pieces) {
      if (!t) return InvalidInput(node, "missing a concatenated input");
    }
    ASSIGN_OR_RETURN(joined, RunStep(node, "Concat", pieces, {{"axis", Attribute::Int(1)}}));
    in.assign(all.begin() + concat - 1, all.end());
    in[0] = &joined;
  }
  std::vector<Tensor> results;
  for (const auto& ins : program.instructions) {
    KernelInputs operands;
    for (int64_t k : ins.operands) {
      if (k < static_cast<int64_t>(in.size())) {
        if (!in[k]) return InvalidInput(node, "missing input " + std::to_string(k));
        operands.push_back(in[k]);
      } else {
        operands.push_back(&results[k - in.size()]);
      }
    }
    ASSIGN_OR_RETURN(Tensor r, RunStep(node, ins.op, operands, ins.attrs));
    results.push_back(std::move(r));
  }
  return std::vector<Tensor>{std::move(results.back())};
}

}  // namespace

void RegisterKilnKernels(KernelRegistry& r) {
  r.Register(kKilnDomain, kiln_ops::kFusedConv, FusedConv);
  r.Register(kKilnDomain, kiln_ops::kFusedMatMul, FusedMatMul);
  r.Register(kKilnDomain, kiln_ops::kFusedElementwise, FusedElementwise);
}

}  // namespace kiln::ref
