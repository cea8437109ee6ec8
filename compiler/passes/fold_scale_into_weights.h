// fold_scale_into_weights: a per-output-channel affine step after a linear layer folds into
// the layer's constants, so the step costs nothing at run time.
//  - y = Conv(x, W, B) (output channels on axis 1), Gemm(A, B, C) (channels = columns) or
//    MatMul(A, B) (channels = the last axis), with constant weights.
//  - y * s or y / s (s constant, one value per channel or a scalar): W' = W * s per output
//    channel (rows of a Conv W, columns of B, transB-aware), bias' = bias * s.
//  - y + t or y - t: bias' = bias + t (a bias is created when absent; Gemm's beta is folded
//    in and reset to 1). MatMul has no bias input: only Mul/Div fold into it (an added bias
//    is fuse_matmul_epilogue's, as FusedMatMul's C).
// Repeats while the new output has another foldable step (Conv -> Mul -> Add is one Conv).
// Preconditions: shapes inferred. Leaves alone: a producer output with a second reader or
// that is a graph output (someone needs the unscaled y), non-constant weights or bias,
// constants that vary along a non-channel axis or would broadcast y to a bigger shape,
// division by a constant with a zero and non-finite constants (folding would change NaN/inf
// behaviour), s / y and t - y, Gemm C that is neither a scalar nor a per-column vector,
// ConvTranspose (its weight layout puts output channels on axis 1; not needed yet).
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::passes {

absl::StatusOr<bool> FoldScaleIntoWeights(Graph& graph);

class FoldScaleIntoWeightsPass : public Pass {
 public:
  std::string name() const override { return "fold_scale_into_weights"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return FoldScaleIntoWeights(graph); }
};

}  // namespace kiln::passes
