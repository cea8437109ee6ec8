// fuse_matmul_epilogue: MatMul or Gemm + [bias Add] + [activation] + [residual Add +
// [activation]] becomes one ai.kiln FusedMatMul (see ir/kiln_ops.h). A constant Add
// varying along the last axis only becomes C (MatMul) or is folded into a constant C (Gemm).
// Preconditions: shapes inferred. Leaves alone: swallowed values with a second consumer or
// that are graph outputs; Gemm with a non-constant C followed by a bias Add (the bias stays an
// Add); MatMul/Gemm with unknown output width.
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::passes {

absl::StatusOr<bool> FuseMatMulEpilogue(Graph& graph);

class FuseMatMulEpiloguePass : public Pass {
 public:
  std::string name() const override { return "fuse_matmul_epilogue"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return FuseMatMulEpilogue(graph); }
};

}  // namespace kiln::passes
