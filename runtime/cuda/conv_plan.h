// The cuDNN call of a Conv or ai.kiln FusedConv, derived without cuDNN (pure, unit-tested):
// NCHW fp32 tensor and filter dims (a 1-D convolution becomes 2-D with a unit height, since
// cuDNN's descriptors start at 4-D), symmetric pads, strides, dilations, groups, and the split
// of the epilogue between cuDNN's fused call and a generated kernel.
//
// cudnnConvolutionBiasActivationForward computes y = act(conv(x) + z + bias) with act ReLU
// (IDENTITY would restrict the algorithm to IMPLICIT_PRECOMP_GEMM). So the fused call is used
// when the epilogue starts with Relu, or with Add (the first residual, as z) then Relu; what
// follows runs in the epilogue kernel. Any other epilogue runs the plain convolution and the
// whole epilogue (bias included) in one generated kernel over its output.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "compiler/codegen/epilogue_emitter.h"
#include "ir/graph.h"

namespace kiln::cuda {

struct ConvPlanOptions {
  // Let cuDNN's fused call apply ReLU. Off: every activation runs in the generated epilogue,
  // which keeps NaN exactly as the reference does (cuDNN's ReLU is not documented to).
  bool fuse_relu = true;
};

struct ConvPlan {
  std::vector<int64_t> x_dims, w_dims, y_dims;  // N, C, [D,] H, W (4-D or 5-D)
  std::vector<int64_t> pads, strides, dilations;  // per spatial dim of the 4/5-D form
  int64_t groups = 1;
  bool fused = false;    // cudnnConvolutionBiasActivationForward (ReLU), else cudnnConvolutionForward
  int bias_input = -1;   // node input of the bias the fused call adds (-1: the engine passes zeros)
  int z_input = -1;      // node input the fused call adds as z (the first residual), or -1
  bool has_epilogue = false;
  codegen::EpilogueSpec epilogue;  // what the generated kernel does after the call
};

// UNIMPLEMENTED for what cuDNN's NCHW fp32 path does not take here (non-constant weights or
// bias, asymmetric pads, more than 3 spatial dims, non-float types); INVALID_ARGUMENT for
// malformed nodes.
absl::StatusOr<ConvPlan> PlanConv(const Node& node, const ConvPlanOptions& options = {});

}  // namespace kiln::cuda
