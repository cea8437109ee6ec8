// Range's output length, shared by the reference kernel (ops_generate.cc) and the Range shape
// rule (compiler/shape/rules_indexing.cc), so the rule and the kernel can never disagree.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::ref {

// Element count of Range(start, limit, delta): max(ceil((limit - start) / delta), 0), exact for
// integer dtypes. INVALID_ARGUMENT for a zero delta, mismatched dtypes or non-scalar inputs.
absl::StatusOr<int64_t> RangeLength(const Node& node, const Tensor& start, const Tensor& limit,
                                    const Tensor& delta);

}  // namespace kiln::ref
