// Einsum equation parsing, shared by the reference kernel and the shape rule.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::ref::nn {

// Every dim of every operand and of the output gets a label: a letter's ASCII code, or
// kEllipsisLabel + j for the j-th dim of the (right-aligned, broadcast) ellipsis.
inline constexpr int kEllipsisLabel = 256;

struct EinsumLabels {
  std::vector<std::vector<int>> inputs;  // one label per input dim
  std::vector<int> output;               // one label per output dim
};

// Parses node's `equation` for operands of the given ranks. Implicit output (no "->"): the
// ellipsis dims, then the letters used exactly once, in ASCII order (numpy's rule).
absl::StatusOr<EinsumLabels> ParseEinsum(const Node& node, const std::vector<int64_t>& ranks);

}  // namespace kiln::ref::nn
