// Resize as per-axis taps: for every output position of every axis, the input indices it
// reads and their weights, computed by the very functions the reference Resize evaluates
// with, so an engine kernel built from it shares the reference's reading of the coordinate
// transforms, nearest rounding, cubic coefficients, antialias and extrapolation.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"
#include "ops/kernel.h"

namespace kiln::ref {

struct ResizeTap {
  int64_t index;
  double weight;
};

struct ResizeAxisPlan {
  int64_t in = 0, out = 0;
  bool resized = false;
  // Per output position: the taps (nearest: one tap of weight 1); none = the extrapolation
  // value (tf_crop_and_resize outside its roi).
  std::vector<std::vector<ResizeTap>> taps;
};

struct ResizePlan {
  bool nearest = true;       // a pure index gather, exact for every dtype
  double extrapolation = 0;  // tf_crop_and_resize's value outside the roi
  std::vector<ResizeAxisPlan> axes;
  std::vector<int64_t> order;  // resized axes, shrinking ones first (smaller intermediates)
};

// The plan of Resize `node` (opset 11+ inputs: roi, scales, sizes) for an input of `shape`,
// reading its optional inputs from `in` (in[0] may be null: only its shape is used).
absl::StatusOr<ResizePlan> PlanResize(const Node& node, const std::vector<int64_t>& shape,
                                      const KernelInputs& in);

}  // namespace kiln::ref
