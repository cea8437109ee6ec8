#include "runtime/cpu/conv_geometry.h"

#include "ops/nn_window.h"

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

}  // namespace kiln::cpu
