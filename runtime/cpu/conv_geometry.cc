#include "runtime/cpu/conv_geometry.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/nn_window.h"
#include "runtime/cpu/nonfinite_guard.h"

namespace kiln::cpu {

std::optional<WindowGeometry> ResolveWindow(const Node& node, const std::vector<int64_t>& in,
                                            const std::vector<int64_t>& out,
                                            const std::vector<int64_t>& kernel) {
  const size_t n = in.size();
  if (out.size() != n || kernel.size() != n || n == 0) return std::nullopt;
  // Strides, dilations and explicit or SAME/VALID pads follow the same window rules as the
  // reference kernels and the shape rules (one implementation, validated there).
  absl::StatusOr<ref::nn::Window> w = ref::nn::ConvWindow(node, in, kernel);
  if (!w.ok()) return std::nullopt;
  WindowGeometry g;
  g.kernel = kernel;
  g.strides = w->strides;
  g.dilations = w->dilations;
  g.pad_begin = w->pad_begin;
  for (size_t i = 0; i < n; ++i) {
    const int64_t span = w->Extent(i);
    int64_t end = w->pad_end[i];
    // oneDNN sizes the output with floor division; ceil_mode's extra window needs the end
    // pad that makes floor give the declared output size.
    if ((in[i] + g.pad_begin[i] + end - span) / g.strides[i] + 1 != out[i]) {
      end = (out[i] - 1) * g.strides[i] + span - in[i] - g.pad_begin[i];
    }
    if (end < 0 || (in[i] + g.pad_begin[i] + end - span) / g.strides[i] + 1 != out[i]) {
      return std::nullopt;
    }
    g.pad_end.push_back(end);
  }
  return g;
}

// Max over output channels of sum |w| (the gain of the convolution on a bounded input), and
// max |b|; +inf when a weight or bias is not finite.
void ConvWeightGains(const Node& node, float* l1, float* bmax) {
  const Tensor& w = *node.input(1)->constant;
  const int64_t oc = w.shape()[0], per = oc > 0 ? w.numel() / oc : 0;
  const float* p = w.data<float>();
  double best = 0;
  for (int64_t o = 0; o < oc; ++o) {
    double sum = 0;
    for (int64_t i = 0; i < per; ++i) sum += std::fabs(p[o * per + i]);
    best = std::max(best, sum);
  }
  *l1 = std::isfinite(best) ? static_cast<float>(best) : std::numeric_limits<float>::infinity();
  *bmax = 0.f;
  if (node.input(2) && node.input(2)->constant) {
    const Tensor& b = *node.input(2)->constant;
    *bmax = FiniteMaxAbs(b.data<float>(), b.numel());
  }
}

}  // namespace kiln::cpu
