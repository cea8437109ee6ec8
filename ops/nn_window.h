// Sliding-window geometry of Conv, ConvTranspose and the pooling operators: attribute
// validation and output sizes. Shared by the reference kernels and the shape-inference rules
// (compiler/shape/rules_nn.cc) so both always agree on output shapes.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::ref::nn {

// Per spatial dim (all vectors have `in.size()` entries).
struct Window {
  std::vector<int64_t> in, kernel, strides, dilations, pad_begin, pad_end, out;
  std::vector<int64_t> output_padding;  // ConvTranspose only

  size_t rank() const { return in.size(); }
  // (kernel - 1) * dilation + 1: the extent one window covers.
  int64_t Extent(size_t d) const { return (kernel[d] - 1) * dilations[d] + 1; }
};

// Conv and pools: reads strides, dilations, pads, auto_pad and ceil_mode (absent on Conv, so
// 0) from the node and computes the output spatial dims. Every attribute is validated:
// wrong lengths, non-positive strides/dilations/kernel, negative pads, windows larger than the
// padded input and absurd magnitudes are INVALID_ARGUMENT.
absl::StatusOr<Window> ConvWindow(const Node& node, const std::vector<int64_t>& in_spatial,
                                  const std::vector<int64_t>& kernel);

// ConvTranspose: also reads output_padding and output_shape. Pads derived from output_shape
// or auto_pad may be negative (the output then extends past the natural result).
absl::StatusOr<Window> ConvTransposeWindow(const Node& node, const std::vector<int64_t>& in_spatial,
                                           const std::vector<int64_t>& kernel);

// The kernel_shape attribute, or `from_weights` when the attribute is absent (Conv).
absl::StatusOr<std::vector<int64_t>> KernelShape(const Node& node, size_t spatial_rank,
                                                 const std::vector<int64_t>* from_weights);

// MaxUnpool's natural output spatial dims, (in - 1) * stride + kernel - pads, from its
// kernel_shape, strides and pads (validated; INVALID_ARGUMENT when they do not fit).
absl::StatusOr<std::vector<int64_t>> MaxUnpoolSpatial(const Node& node,
                                                      const std::vector<int64_t>& in);

// A window padded out to three spatial dims (depth, height, width) with unit leading dims,
// so 1-D, 2-D and 3-D kernels share one loop nest.
struct Win3 {
  int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], out[3];
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t k_size() const { return k[0] * k[1] * k[2]; }
};
// UNIMPLEMENTED for more than 3 spatial dims, INVALID_ARGUMENT for none.
absl::StatusOr<Win3> To3D(const Node& node, const Window& w);

// The range [lo, hi) of i in [0, n) for which 0 <= i * s + base < limit (s > 0).
void ValidRange(int64_t base, int64_t s, int64_t n, int64_t limit, int64_t& lo, int64_t& hi);

}  // namespace kiln::ref::nn
