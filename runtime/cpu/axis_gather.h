// A gather whose source index is separable per axis: output coordinate (o_0 .. o_r) reads
// input (map_0[o_0] .. map_r[o_r]), or a fill value where any map says -1. Pad (every mode)
// and nearest-mode Resize are this walk with different maps.
#pragma once

#include <memory>
#include <vector>

#include "runtime/cpu/build_context.h"

namespace kiln::cpu {

struct AxisGatherPlan {
  std::vector<int64_t> out_shape, in_strides;
  std::vector<std::vector<int64_t>> map;  // per axis: output index -> input index, -1 = fill
  size_t elem = 0;                        // element size in bytes (1, 2, 4 or 8)
};

// The kernel for `plan` from slot `in` to slot `out`; `fill` holds the fill value's bytes.
// Where the innermost map is the identity shifted by a constant over a span, that span is
// copied in one memcpy per row.
std::unique_ptr<CpuKernel> MakeAxisGather(int in, int out, AxisGatherPlan plan,
                                          std::vector<unsigned char> fill);

// Row-major strides of `shape`.
std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape);

}  // namespace kiln::cpu
