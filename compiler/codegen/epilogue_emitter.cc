#include "compiler/codegen/epilogue_emitter.h"

#include "compiler/codegen/elementwise_emitter.h"

namespace kiln::codegen {
namespace {

using Kind = KernelParam::Kind;

// An epilogue activation as a program step on register `reg`.
absl::StatusOr<EwProgram::Step> ActivationStep(const kiln_ops::EpilogueStep& s, int reg) {
  EwProgram::Step st{s.op, {reg}, {}};
  if (s.op == "LeakyRelu") st.attrs["alpha"] = Attribute::Float(s.alpha);
  if (s.op == "HardSigmoid") {
    st.attrs["alpha"] = Attribute::Float(s.alpha);
    st.attrs["beta"] = Attribute::Float(s.beta);
  }
  if (s.op == "Clip") {
    // Bounds as attributes (Clip-6's form), which the expression table reads.
    st.attrs["min"] = Attribute::Float(s.alpha);
    st.attrs["max"] = Attribute::Float(s.beta);
  }
  if (!kiln_ops::IsEpilogueActivation(s.op)) return absl::UnimplementedError("epilogue step " + s.op);
  return st;
}

int AddInput(EwProgram& p, int node_input, const std::vector<int64_t>& shape) {
  EwProgram::Input in;
  in.shape = shape;
  in.param = static_cast<int>(p.params.size());
  p.params.push_back({Kind::kInput, node_input});
  p.inputs.push_back(in);
  return static_cast<int>(p.inputs.size()) - 1;
}

}  // namespace

absl::StatusOr<Kernel> EmitEpilogue(const EpilogueSpec& spec, const std::string& name) {
  EwProgram p;
  p.out_shape = spec.out_shape;
  p.params.push_back({Kind::kOutput, 0});
  p.out_param = 0;
  p.inputs.push_back({DType::kFloat32, spec.out_shape, 0});
  std::vector<int> residual_regs;
  int bias_reg = -1;
  if (spec.bias_input >= 0) bias_reg = AddInput(p, spec.bias_input, spec.bias_shape);
  if (spec.residual_inputs.size() != spec.residual_shapes.size() ||
      spec.residual_inputs.size() != kiln_ops::ResidualCount(spec.steps)) {
    return absl::InvalidArgumentError("epilogue: residual inputs do not match the Add steps");
  }
  for (size_t r = 0; r < spec.residual_inputs.size(); ++r) {
    residual_regs.push_back(AddInput(p, spec.residual_inputs[r], spec.residual_shapes[r]));
  }
  // Registers after the inputs are step results; `cur` is the running value.
  int cur = 0;
  auto push = [&](EwProgram::Step st) {
    p.steps.push_back(std::move(st));
    cur = static_cast<int>(p.inputs.size() + p.steps.size()) - 1;
  };
  if (bias_reg >= 0) {
    int b = bias_reg;
    if (spec.bias_scale != 1.f) {
      push({"Scale", {bias_reg}, {{"alpha", Attribute::Float(spec.bias_scale)}}});
      b = cur;
      cur = 0;
    }
    push({"Add", {cur, b}, {}});
  }
  size_t next_residual = 0;
  for (const kiln_ops::EpilogueStep& s : spec.steps) {
    if (s.op == "Add") {
      push({"Add", {cur, residual_regs[next_residual++]}, {}});
      continue;
    }
    ASSIGN_OR_RETURN(EwProgram::Step st, ActivationStep(s, cur));
    push(std::move(st));
  }
  if (p.steps.empty()) return absl::InvalidArgumentError("epilogue: nothing to do");
  return EmitProgram(p, name);
}

}  // namespace kiln::codegen
