// MaxPool and AveragePool (1-3 spatial dims, float32): one thread per output element walks
// its window, with the reference's rules: padding never contributes a value, MaxPool
// propagates NaN and yields -inf for a window with no taps, AveragePool divides by the taps
// inside the input (or inside input plus explicit pads with count_include_pad).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/codegen/cuda_kernel.h"
#include "ir/graph.h"

namespace kiln::codegen {

bool IsPoolNode(const Node& node);
absl::StatusOr<std::vector<Kernel>> EmitPool(const Node& node, const std::string& name);

}  // namespace kiln::codegen
