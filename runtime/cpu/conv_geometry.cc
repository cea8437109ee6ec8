#include "runtime/cpu/conv_geometry.h"

namespace kiln::cpu {

std::optional<WindowGeometry> ResolveWindow(const Node& node, const std::vector<int64_t>& in,
                                            const std::vector<int64_t>& out,
                                            const std::vector<int64_t>& kernel) {
  const size_t n = in.size();
  if (out.size() != n || kernel.size() != n || n == 0) return std::nullopt;
  WindowGeometry g;
  g.kernel = kernel;
  g.strides = node.GetInts("strides", std::vector<int64_t>(n, 1));
  g.dilations = node.GetInts("dilations", std::vector<int64_t>(n, 1));
  std::vector<int64_t> pads = node.GetInts("pads", std::vector<int64_t>(2 * n, 0));
  const std::string auto_pad = node.GetString("auto_pad", "NOTSET");
  if (g.strides.size() != n || g.dilations.size() != n || pads.size() != 2 * n) {
    return std::nullopt;
  }
  g.pad_begin.assign(pads.begin(), pads.begin() + n);
  for (size_t i = 0; i < n; ++i) {
    if (g.strides[i] < 1 || g.dilations[i] < 1) return std::nullopt;
    const int64_t span = (kernel[i] - 1) * g.dilations[i] + 1;
    const int64_t total = std::max<int64_t>(0, (out[i] - 1) * g.strides[i] + span - in[i]);
    int64_t end = pads[n + i];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      g.pad_begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      end = total - g.pad_begin[i];
    } else if (auto_pad == "VALID") {
      g.pad_begin[i] = end = 0;
    } else if (auto_pad != "NOTSET") {
      return std::nullopt;
    }
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
