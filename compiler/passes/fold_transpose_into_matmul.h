// fold_transpose_into_matmul: a matrix product whose operand is a Transpose that swaps only
// the last two dims (perm [0, .., r-3, r-1, r-2]) reads the Transpose's input instead, with
// transA/transB set: MatMul(q, Transpose(k)) -> FusedMatMul(q, k, transB=1). Attention
// computes every score this way (q @ k^T); the Transpose copied the whole key cache every
// step, the product now reads it with swapped strides.
// Applies to MatMul (becomes an ai.kiln FusedMatMul with no epilogue) and FusedMatMul (its
// flag flips: transposing twice is the identity). Preconditions: shapes inferred.
// Leaves alone: Gemm (its operands are 2-D constants after folding, or it is not Kiln's to
// rewrite), operands of rank < 2 (a vector has no last-two swap), and Transposes with another
// permutation or an unknown one. (A 2-D FusedMatMul follows Gemm, whose flags are operand
// transposes too, so flipping one there is exact as well.) The Transpose itself stays
// when it has other readers (it is then still needed) and goes with dead code otherwise.
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::passes {

absl::StatusOr<bool> FoldTransposeIntoMatMul(Graph& graph);

class FoldTransposeIntoMatMulPass : public Pass {
 public:
  std::string name() const override { return "fold_transpose_into_matmul"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return FoldTransposeIntoMatMul(graph); }
};

}  // namespace kiln::passes
