// fold_repeat_into_matmul: a matrix product whose B operand repeats each of its heads
// (Reshape(Expand(Unsqueeze(t)))) reads t itself, the A operand's rows of each group of heads
// stacked. Grouped-query attention (LLaMA, Mistral, Qwen) stores G key/value heads and serves
// R query heads from each; its export repeats the cache to G*R heads before `q @ k^T` and
// `p @ v`, a copy of the whole cache per product per step. Since the heads of one group are
// adjacent, A [.., G*R, S, K] is [.., G, R*S, K] as it lies in memory, and
// A @ repeat(t) = ungroup(group(A) @ t): MatMul(p, Reshape(Expand(Unsqueeze(v)))) ->
// Reshape(MatMul(Reshape(p), v)), both Reshapes views, and the product has R*S rows per
// group instead of S (a decode step's one row becomes R).
// Applies to MatMul and FusedMatMul (transB reads t's last two dims as it read the repeat's)
// with two inputs and no transA, every shape static, when the Unsqueeze inserts one axis a
// right before the two matrix axes (a >= 1), the Expand widens only that axis, the Reshape
// merges exactly axes a - 1 and a, and A has the same rank and head count. Leaves alone: an
// Expand that also widens another axis, a Reshape that merges anything else, a repeat
// farther from the matrix axes or on the A operand, transA, symbolic shapes, and a
// FusedMatMul with an extra (bias or residual) operand shaped for the output. The Expand goes
// with dead code when nothing else reads it. Preconditions: shapes inferred.
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::passes {

absl::StatusOr<bool> FoldRepeatIntoMatMul(Graph& graph);

class FoldRepeatIntoMatMulPass : public Pass {
 public:
  std::string name() const override { return "fold_repeat_into_matmul"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return FoldRepeatIntoMatMul(graph); }
};

}  // namespace kiln::passes
