// lower_einsum: a two-operand Einsum is a batched matrix product in disguise. Each label is
// batch (in both operands and the output), contracted (in both operands, not the output),
// left-free (left operand and output only) or right-free (right operand and output only).
// The Einsum becomes
//   A -> Transpose to [batch..., left-free..., contracted...] -> Reshape to [batch..., M, K]
//   B -> Transpose to [batch..., contracted..., right-free...] -> Reshape to [batch..., K, N]
//   MatMul -> [batch..., M, N] -> Reshape to [batch..., left-free..., right-free...]
//   -> Transpose to the output's label order,
// with identity Transposes and no-op Reshapes left out (bij,bjk->bik is a bare MatMul). The
// batch dims are kept as MatMul batch dims rather than flattened into one: MatMul takes any
// number of them, and exporters' attention einsums then need no Reshape at all. The MatMul is
// an ordinary one, so fuse_matmul_epilogue and the backends' GEMMs pick it up.
// Handles spaces in the equation, implicit output, ellipsis (its dims are labels like any
// other; an ellipsis dim present in one operand only is free), size-1 dims and empty groups
// (no batch, nothing contracted: an outer product; nothing free: a dot product).
// Preconditions: shapes inferred and static (after Specialize). Leaves alone: one or three+
// operands; a label repeated within an operand (a diagonal); a label in one operand only and
// not in the output (a sum over it); a label whose sizes differ between the operands
// (broadcasting); unknown or zero-sized dims; non-float dtypes (MatMul accumulates integers
// exactly where the Einsum kernel goes through double, so the results could differ).
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::passes {

absl::StatusOr<bool> LowerEinsum(Graph& graph);

class LowerEinsumPass : public Pass {
 public:
  std::string name() const override { return "lower_einsum"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return LowerEinsum(graph); }
};

}  // namespace kiln::passes
