// Internal to runtime/cpu: ONNX window attributes (Conv and pools) resolved to explicit
// per-axis strides, dilations and begin/end pads, the form oneDNN takes.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ir/graph.h"

namespace kiln::cpu {

struct WindowGeometry {
  std::vector<int64_t> kernel, strides, dilations, pad_begin, pad_end;
};

// `in` and `out` are the spatial dims of input and output; `kernel` the window. The end pads
// are derived from the output size, so ceil_mode and SAME_* padding come out right. nullopt
// for attributes outside ONNX's rules.
std::optional<WindowGeometry> ResolveWindow(const Node& node, const std::vector<int64_t>& in,
                                            const std::vector<int64_t>& out,
                                            const std::vector<int64_t>& kernel);

// A convolution's weight gains: the max over output channels of sum |w| (its gain on a
// bounded input) and max |bias|; +inf when a weight or bias is not finite.
void ConvWeightGains(const Node& node, float* l1, float* bmax);

}  // namespace kiln::cpu
