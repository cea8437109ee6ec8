// Internal to runtime/cpu: the convolution kernel at run time (dnnl_conv.cc chooses and builds
// its primitive): the fast primitive, its guard for non-finite inputs and the exact path, and
// activations run after a primitive that could not take them as post-ops.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/aligned.h"
#include "ir/kiln_ops.h"
#include "runtime/cpu/build_context.h"
#include "runtime/cpu/epilogue_ops.h"

namespace kiln::cpu {

// y[i] = the activations in order, over n elements split across the OpenMP team.
void RunActivations(const std::vector<EpilogueActivation>& acts, float* y, int64_t n);

// The parts of the convolution its exact path re-creates without post-ops.
struct ConvGeometry {
  dnnl::memory::dims strides, dilations, pad_begin, pad_end;
  dnnl::memory::desc bias_md;
  // Winograd's weights are transformed: the exact path packs its own from the plain ones.
  bool winograd = false;
  Tensor plain_weights;  // set when winograd (shares the graph's buffer)
  // Set when the primitive was made without the epilogue's activations (oneDNN 2.6's
  // Winograd kernel takes no SiLU or GELU post-op; its swish is slower than the own SiLU):
  // they run in order on dst after it. Each maps 0 to 0 where dst has blocked padding,
  // which must stay zero.
  std::vector<EpilogueActivation> after;
};

// The exact path, built on first use: the same convolution without post-ops into a temp,
// then the epilogue with the own element-wise ops (nonfinite_guard.h).
struct ExactConv {
  dnnl::convolution_forward prim;
  dnnl::memory
      weights;  // the fast primitive's, or a reorder of them if this one wants another layout
  AlignedPtr<float> temp;
  AlignedPtr<char> scratch;
  dnnl::memory::desc src_md, dst_md, scratch_md;
};

class ConvKernel : public CpuKernel {
 public:
  absl::Status Run(const ExecContext& ctx) override;

  DnnlCall call_;
  std::unique_ptr<CpuKernel> residual_;  // copies the residual into dst before the sum
  // The guard (nonfinite_guard.h); `guarded` when a post-op is not exact on NaN.
  bool guarded = false;
  // The epilogue always runs apart (the exact path): oneDNN has a JIT kernel for this
  // convolution on this CPU only without the post-ops.
  bool epilogue_apart = false;
  int x_slot = -1, src_slot = -1, res_slot = -1, dst_slot = -1, y_slot = -1;
  int64_t res_floats = 0, dst_floats = 0;
  // Where the input bound is scanned: src, or x itself when src is its bf16 copy; and the
  // bound's slack for rounding (bf16 operands round by up to 2^-8 each).
  int scan_slot = -1;
  int64_t scan_floats = 0;
  float slack = 1.001f;
  float w_l1 = 0.f, b_max = 0.f;  // max over output channels of sum |w|; max |bias|
  std::vector<kiln_ops::EpilogueStep> steps;
  // For the exact path.
  dnnl::engine engine;
  dnnl::convolution_forward::primitive_desc pd;
  ConvGeometry geometry;
  dnnl::memory weights, bias;

 private:
  float OutputBound(const ExecContext& ctx, bool scan) const;
  absl::Status RunExact(const ExecContext& ctx);
  absl::Status MakeExact();
  std::unique_ptr<ExactConv> exact_;
};

}  // namespace kiln::cpu
