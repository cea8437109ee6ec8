// fuse_conv_epilogue: Conv + [bias Add] + [activation] + [residual Add + [activation]] becomes
// one ai.kiln FusedConv (see ir/kiln_ops.h), so a backend runs the epilogue as
// post-ops of the convolution (oneDNN eltwise/sum post-ops, a CUDA epilogue).
// A per-channel constant Add becomes (or is added to) the bias; the residual Add needs an
// operand of exactly the output's static shape.
// Preconditions: shapes inferred; fold_batchnorm has run (so Conv+BN+Relu is Conv+Relu).
// Leaves alone: any swallowed value with a second consumer or that is a graph output (the
// classic bug: an Add whose output also feeds the next block's skip connection), bias Adds
// when the Conv's own bias is not constant, Conv with unknown output channels.
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::passes {

absl::StatusOr<bool> FuseConvEpilogue(Graph& graph);

class FuseConvEpiloguePass : public Pass {
 public:
  std::string name() const override { return "fuse_conv_epilogue"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return FuseConvEpilogue(graph); }
};

}  // namespace kiln::passes
