#include "runtime/cuda/conv_plan.h"

#include "ir/kiln_ops.h"
#include "ops/nn_window.h"
#include "runtime/cuda/operand_dims.h"

namespace kiln::cuda {
namespace {

// 1-D convolutions gain a unit height: (N, C, W) -> (N, C, 1, W).
std::vector<int64_t> AtLeast4D(std::vector<int64_t> d) {
  if (d.size() == 3) d.insert(d.begin() + 2, 1);
  return d;
}

absl::Status ResolveGeometry(const Node& node, ConvPlan& p) {
  ASSIGN_OR_RETURN(std::vector<int64_t> x, StaticFloatDims(node.input(0), node));
  ASSIGN_OR_RETURN(std::vector<int64_t> w, StaticFloatDims(node.input(1), node));
  ASSIGN_OR_RETURN(std::vector<int64_t> y, StaticFloatDims(node.output(0), node));
  if (x.size() < 3 || x.size() > 5 || w.size() != x.size() || y.size() != x.size()) {
    return absl::UnimplementedError(node.Describe() + ": rank " + std::to_string(x.size()));
  }
  const std::vector<int64_t> spatial(x.begin() + 2, x.end()), kernel(w.begin() + 2, w.end());
  ASSIGN_OR_RETURN(ref::nn::Window win, ref::nn::ConvWindow(node, spatial, kernel));
  for (size_t d = 0; d < spatial.size(); ++d) {
    // cuDNN pads both ends alike; SAME_UPPER with an even window is asymmetric.
    if (win.pad_begin[d] != win.pad_end[d]) {
      return absl::UnimplementedError(node.Describe() + ": asymmetric padding");
    }
    if (win.out[d] != y[2 + d]) return absl::InvalidArgumentError(node.Describe() + ": output size");
  }
  p.groups = node.GetInt("group", 1);
  if (p.groups < 1 || x[1] % p.groups != 0 || w[0] % p.groups != 0 || w[1] * p.groups != x[1]) {
    return absl::InvalidArgumentError(node.Describe() + ": group does not divide the channels");
  }
  p.x_dims = AtLeast4D(x);
  p.w_dims = AtLeast4D(w);
  p.y_dims = AtLeast4D(y);
  p.pads = win.pad_begin;
  p.strides = win.strides;
  p.dilations = win.dilations;
  if (spatial.size() == 1) {
    p.pads.insert(p.pads.begin(), 0);
    p.strides.insert(p.strides.begin(), 1);
    p.dilations.insert(p.dilations.begin(), 1);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ConvPlan> PlanConv(const Node& node, const ConvPlanOptions& options) {
  const bool fused_node = node.domain == kKilnDomain && node.op_type == kiln_ops::kFusedConv;
  if (!fused_node && !(node.domain.empty() && node.op_type == "Conv")) {
    return absl::InvalidArgumentError(node.Describe() + " is not a convolution");
  }
  ConvPlan p;
  RETURN_IF_ERROR(ResolveGeometry(node, p));
  if (!node.input(1)->is_constant()) return absl::UnimplementedError(node.Describe() + ": weights not constant");
  const Value* bias = node.input(2);
  if (bias && (!bias->is_constant() || bias->dtype != DType::kFloat32)) {
    return absl::UnimplementedError(node.Describe() + ": bias not a float constant");
  }
  const std::vector<kiln_ops::EpilogueStep> steps = fused_node ? kiln_ops::ReadEpilogue(node)
                                                               : std::vector<kiln_ops::EpilogueStep>{};
  const size_t residuals = kiln_ops::ResidualCount(steps);
  if (residuals > 0 && node.inputs.size() < 3 + residuals) {
    return absl::InvalidArgumentError(node.Describe() + ": residual inputs");
  }
  // How many leading steps the fused call takes: [Relu] or [Add, Relu].
  size_t taken = 0;
  if (options.fuse_relu && !steps.empty()) {
    if (steps[0].op == "Relu") taken = 1;
    if (steps.size() > 1 && steps[0].op == "Add" && steps[1].op == "Relu") taken = 2;
  }
  // cuDNN adds z element by element: a broadcast residual goes to the epilogue kernel.
  const Value* z = node.input(3);
  if (taken == 2 && (!z || !z->shape || !IsStatic(*z->shape) ||
                     StaticDims(*z->shape) != StaticDims(*node.output(0)->shape))) {
    taken = 0;
  }
  p.fused = taken > 0;
  if (p.fused) {
    p.bias_input = bias ? 2 : -1;
    if (taken == 2) p.z_input = 3;
  }
  codegen::EpilogueSpec& e = p.epilogue;
  e.out_shape = StaticDims(*node.output(0)->shape);
  if (!p.fused && bias) {
    e.bias_input = 2;
    e.bias_shape = std::vector<int64_t>(e.out_shape.size() - 1, 1);
    e.bias_shape[0] = e.out_shape[1];
  }
  int next_residual = 3 + (taken == 2 ? 1 : 0);
  for (size_t s = taken; s < steps.size(); ++s) {
    e.steps.push_back(steps[s]);
    if (steps[s].op != "Add") continue;
    const Value* r = node.input(next_residual);
    if (!r || !r->shape || !IsStatic(*r->shape)) return absl::InvalidArgumentError(node.Describe() + ": residual");
    e.residual_inputs.push_back(next_residual++);
    e.residual_shapes.push_back(StaticDims(*r->shape));
  }
  p.has_epilogue = e.bias_input >= 0 || !e.steps.empty();
  return p;
}

}  // namespace kiln::cuda
