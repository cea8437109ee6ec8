// The element-wise tail of an ai.kiln FusedConv / FusedMatMul that its library call leaves
// undone (runtime/cuda/conv_plan.h and matmul_plan.h decide the split): over the product's
// output in place, y = steps(y + bias_scale * bias), where the steps are epilogue activations
// and residual adds (kiln_ops::EpilogueStep).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/codegen/cuda_kernel.h"
#include "ir/kiln_ops.h"

namespace kiln::codegen {

struct EpilogueSpec {
  std::vector<int64_t> out_shape;
  int bias_input = -1;              // node input added first (a conv bias, Gemm's C), or -1
  std::vector<int64_t> bias_shape;  // as it broadcasts against out_shape ({C, 1, 1} for a conv)
  float bias_scale = 1.f;           // Gemm's beta
  std::vector<kiln_ops::EpilogueStep> steps;
  std::vector<int> residual_inputs;  // node input of each "Add" step, in order
  std::vector<std::vector<int64_t>> residual_shapes;
};

// Parameter 0 is the output (output 0, read and written), then the bias and residuals.
absl::StatusOr<Kernel> EmitEpilogue(const EpilogueSpec& spec, const std::string& name);

}  // namespace kiln::codegen
