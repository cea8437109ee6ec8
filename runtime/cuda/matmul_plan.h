// The cuBLASLt call of a MatMul, Gemm or ai.kiln FusedMatMul, derived without cuBLAS (pure,
// unit-tested). ONNX operands are row-major; cuBLASLt is column-major, and a row-major X is
// the column-major X^T. So Y = op(A) op(B) (Y: m x n) is computed as Y^T = op(B)^T op(A)^T:
// cuBLASLt's A is our B, its B is our A, its D (n x m, column-major) is our Y. Batched
// products (MatMul's leading dims) are strided batches; an operand whose batch dims are all
// broadcast has stride 0, other partial broadcasts are not a strided batch (UNIMPLEMENTED).
//
// Gemm's C: a [n] (or [1, n]) row vector with beta == 1 is cuBLASLt's bias epilogue (which
// then also takes a leading Relu, or GeluTanh: cuBLASLt's GELU is the tanh form); a C with
// Y's exact shape is cuBLASLt's C with beta; any other C, and every remaining epilogue step,
// runs in a generated epilogue kernel.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "compiler/codegen/epilogue_emitter.h"
#include "compiler/ir/graph.h"

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

absl::StatusOr<MatmulPlan> PlanMatmul(const Node& node, const MatmulPlanOptions& options = {});

}  // namespace kiln::cuda
