// fuse_elementwise: maximal groups of element-wise operators (numpy broadcasting included)
// become one ai.kiln FusedElementwise carrying a straight-line program over the group's
// inputs (ir/kiln_ops.h). The program is what the CPU executor and the CUDA code
// generator consume: one pass over memory instead of one per operator.
// A group grows backwards from its last node: a producer joins when it is element-wise, has
// one output, and every consumer of that output is already in the group (so no value the
// group hides is needed outside it) and the output is not a graph output.
// Preconditions: shapes inferred; run after the epilogue fusions (an activation right after a
// Conv belongs in the convolution's epilogue, not in a separate pass over memory).
// QDQ models: a per-tensor DequantizeLinear (uint8/int8 -> float32, constant scale and zero
// point) joins a group as any element-wise op, but only reading a group input (its integer
// data is loaded and converted by the kernels); a per-tensor QuantizeLinear (float32 ->
// uint8/int8, constant parameters) only ends a group, whose output is then integer. So
// DQ(a), DQ(b) -> Add -> Relu -> Q is one pass reading and writing 8-bit tensors; the scale
// and zero point constants stay inputs of the fused node, so the program is still ai.onnx
// operators (the reference runs it as such).
// Leaves alone: single operators (nothing to gain), multi-output operators, per-axis or
// non-constant Q/DQ parameters, 16/32-bit and float8/int4 quantized types.
#pragma once

#include <string>

#include "compiler/passes/pass.h"

namespace kiln::passes {

bool IsFusibleElementwise(const Node& node);
absl::StatusOr<bool> FuseElementwise(Graph& graph);

class FuseElementwisePass : public Pass {
 public:
  std::string name() const override { return "fuse_elementwise"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return FuseElementwise(graph); }
};

}  // namespace kiln::passes
