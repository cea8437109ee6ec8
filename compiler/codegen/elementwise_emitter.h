// Kernels for element-wise work: single ai.onnx element-wise operators, ai.kiln
// FusedElementwise programs, and the epilogues of convolutions and products (bias,
// activations, residual adds) that a library call does not fuse.
//
// One thread per output element (a grid-stride loop): every input is loaded through its
// broadcast strides (IndexSpace), the program runs in registers, the result is stored once.
// Input element i is read before output element i is written, so an output planned over a
// same-shaped input (the memory plan's in-place rule) is safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/codegen/cuda_kernel.h"
#include "ir/graph.h"

namespace kiln::codegen {

// A straight-line element-wise program. Register k < inputs.size() is input k; register
// inputs.size() + j is the result of step j; the last step's result is stored.
struct EwProgram {
  struct Input {
    DType dtype = DType::kFloat32;
    std::vector<int64_t> shape;  // broadcasts to out_shape
    int param = 0;               // the kernel parameter it is read from
  };
  struct Step {
    std::string op;
    std::vector<int> args;  // registers; -1 for an omitted optional operand
    std::map<std::string, Attribute> attrs;
  };
  std::vector<Input> inputs;
  std::vector<Step> steps;
  std::vector<int64_t> out_shape;
  DType out_dtype = DType::kFloat32;
  int out_param = 0;
  std::vector<KernelParam> params;  // what each parameter binds to
};

// Whether EmitElementwise takes this node's op type (its dtypes may still be refused).
bool IsElementwiseNode(const Node& node);
// The program of an element-wise node (a FusedElementwise program or one operator).
// INVALID_ARGUMENT without static shapes; UNIMPLEMENTED for what kernels do not handle.
absl::StatusOr<EwProgram> ProgramOf(const Node& node);
absl::StatusOr<Kernel> EmitProgram(const EwProgram& program, const std::string& name);
absl::StatusOr<std::vector<Kernel>> EmitElementwise(const Node& node, const std::string& name);

}  // namespace kiln::codegen
