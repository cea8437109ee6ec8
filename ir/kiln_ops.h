// Kiln's own operators (domain "ai.kiln"), produced by the fusion passes, and their attribute
// schema: the one place the passes, shape rules, reference kernels, exporter and backends
// agree on.
//
// FusedConv(X, W, B?, R...)   = epilogue(Conv(X, W, B)); Conv's attributes as in ai.onnx.
// FusedMatMul(A, B, C?, R...) = epilogue(alpha * op(A) @ op(B) + beta * C); alpha, beta as in
//                               Gemm; op() swaps an operand's last two dims when transA/transB
//                               is set (rank >= 2; 2-D operands are Gemm's case), then MatMul's
//                               batched broadcasting. C broadcasts against the product.
// Epilogue (both): string list `epilogue` of steps applied in order, float lists
// `epilogue_alpha` and `epilogue_beta` (one per step). A step is an activation (below) or
// "Add", which adds the next residual input R (numpy broadcasting).
//
// `kiln_precision` (string, on MatMul, Gemm, FusedMatMul, Conv and FusedConv; written by
// assign_precision):
// "bf16" lets a backend multiply the operands rounded to bfloat16, accumulating in float32.
// The reference computes in float32 whatever it says; the warm-up check bounds the difference.
//
// FusedElementwise(I...) = a straight-line program of ai.onnx element-wise operators:
//   `ops` (strings): the operator of each instruction;
//   `arity` (ints): operand count of each instruction;
//   `operands` (ints, flattened): k < #inputs names input k, k >= #inputs names the result of
//                                 instruction k - #inputs;
//   attributes of instruction i are stored as "i<i>.<name>" (e.g. "i2.alpha");
//   `dtype` (int): the output dtype. The output is the last instruction's result.
//   `concat_inputs` (int K, optional, >= 2; written by fuse_concat_elementwise): the first K
//                   inputs are one operand, their concatenation along axis 1 (the channels;
//                   same rank, equal other dims). The program's operands are then that
//                   concatenation (operand 0) and inputs K.. (operands 1..); #inputs above
//                   counts operands.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::kiln_ops {

inline constexpr char kFusedConv[] = "FusedConv";
inline constexpr char kFusedMatMul[] = "FusedMatMul";
inline constexpr char kFusedElementwise[] = "FusedElementwise";
inline constexpr char kPrecisionAttr[] = "kiln_precision";
inline constexpr char kConcatInputs[] = "concat_inputs";

struct EpilogueStep {
  std::string op;  // Relu LeakyRelu Clip Sigmoid HardSigmoid HardSwish Tanh Gelu GeluTanh SiLU Add
  float alpha = 0.0f;  // LeakyRelu alpha, HardSigmoid alpha, Clip min
  float beta = 0.0f;   // HardSigmoid beta, Clip max
};

bool IsEpilogueActivation(const std::string& op);
std::vector<EpilogueStep> ReadEpilogue(const Node& node);
void WriteEpilogue(Node& node, const std::vector<EpilogueStep>& steps);
// Number of "Add" steps (residual inputs the node carries after its first three inputs).
size_t ResidualCount(const std::vector<EpilogueStep>& steps);
// Whether `name` is one of the epilogue attributes (not forwarded to Conv/Gemm).
bool IsEpilogueAttribute(const std::string& name);

struct Instruction {
  std::string op;
  std::vector<int64_t> operands;
  std::map<std::string, Attribute> attrs;
};

struct Program {
  std::vector<Instruction> instructions;
  DType dtype = DType::kUndefined;
};

absl::StatusOr<Program> ReadProgram(const Node& node);
// A FusedElementwise's `concat_inputs` (0 when absent: every input is an operand).
int64_t ConcatInputs(const Node& node);
// The program's operand count: the inputs, with the concatenated ones counted once.
int64_t ProgramOperands(const Node& node);
void WriteProgram(Node& node, const Program& program);

}  // namespace kiln::kiln_ops
