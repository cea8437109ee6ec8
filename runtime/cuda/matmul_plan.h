// The cuBLASLt call of a MatMul, Gemm or ai.kiln FusedMatMul, derived without cuBLAS (pure,
// unit-tested). ONNX operands are row-major; cuBLASLt is column-major, and a row-major X is
// the column-major X^T. So Y = op(A) op(B) (Y: m x n) is computed as Y^T = op(B)^T op(A)^T:
// cuBLASLt's A is our B, its B is our A, its D (n x m, column-major) is our Y. Batched
// products (MatMul's leading dims) are strided batches; an operand whose batch dims are all
// broadcast has stride 0, other partial broadcasts are not a strided batch (UNIMPLEMENTED).
//
// Gemm's C: a [n] (or [1, n]) row vector with beta == 1 is cuBLASLt's bias epilogue (which
// then also takes a leading Relu, or GeluTanh: cuBLASLt's GELU is the tanh form) and the
// call's beta is 0; a C with Y's exact shape is cuBLASLt's C with beta; any other C, and
// every remaining epilogue step, runs in a generated epilogue kernel.
//
// cuBLASLt computes D = epilogue(alpha * op(A) op(B) + beta * C) and reads C whenever beta is
// not 0. A plan without a C of its own (c_input == -1) passes D as C (C may alias D), so its
// beta must be 0, or D's previous contents would be added: MakeMatmulStep refuses such a plan.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "compiler/codegen/epilogue_emitter.h"
#include "ir/graph.h"

namespace kiln::cuda {

struct MatmulPlanOptions {
  bool fuse_activation = true;  // let cuBLASLt's epilogue apply Relu / GeluTanh
};

// One column-major matrix operand of cuBLASLt (its layout descriptor and op).
struct LtMatrix {
  int64_t rows = 0, cols = 0, ld = 0;  // the stored matrix
  bool transpose = false;              // CUBLAS_OP_T
  int64_t batch_stride = 0;            // elements between batch matrices (0: shared)
};

struct MatmulPlan {
  int64_t m = 0, n = 0, k = 0;  // row-major: Y[m, n] = op(A)[m, k] op(B)[k, n]
  int64_t batch = 1;
  LtMatrix lt_a, lt_b, lt_d;    // cuBLASLt's A (our B), B (our A), D (our Y)
  int a_input = 0, b_input = 1; // node inputs read as our A and B
  float alpha = 1.f, beta = 0.f;
  int c_input = -1;             // full-shape C read by cuBLASLt with beta (else -1)
  enum class Epilogue { kDefault, kBias, kRelu, kReluBias, kGelu, kGeluBias };
  Epilogue epilogue = Epilogue::kDefault;
  int bias_input = -1;          // the [n] bias of a bias epilogue
  bool has_epilogue = false;
  codegen::EpilogueSpec tail;   // what the generated kernel does after the call
};

// The alignment cuBLASLt may assume of an operand (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES):
// the largest power of two, at most 256 and at least 4 (a float), that divides its address
// and, for a batch, the byte stride between its matrices (every matrix starts there too).
// Arena offsets are only 64-byte aligned (compiler/plan/memory_plan.h), so the heuristic must
// be told, or it may choose a kernel that assumes 256.
inline constexpr uint32_t kLtMaxAlignment = 256;
uint32_t LtAlignment(uintptr_t address, int64_t batch_stride_elements, int64_t batch);

absl::StatusOr<MatmulPlan> PlanMatmul(const Node& node, const MatmulPlanOptions& options = {});

}  // namespace kiln::cuda
