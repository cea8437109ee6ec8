// Small shape helpers shared by the emitters.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::codegen {

// The static shape of a value; INVALID_ARGUMENT naming it when absent, symbolic or unknown.
absl::StatusOr<std::vector<int64_t>> StaticShapeOf(const Value* v);
// The constant int64 contents of an optional input (empty when omitted); INVALID_ARGUMENT
// when present but not constant.
absl::StatusOr<std::vector<int64_t>> ConstantInts(const Node& node, size_t input);
// An axis in [-rank, rank) made non-negative; INVALID_ARGUMENT outside.
absl::StatusOr<int64_t> NormalizedAxis(const Node& node, int64_t axis, int64_t rank);

}  // namespace kiln::codegen
