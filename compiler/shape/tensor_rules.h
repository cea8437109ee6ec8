// Private to the tensor-family shape rules (rules_tensor.cc, rules_layout.cc): the second
// registration function and the symbolic-dim helpers both files use.
#pragma once

#include <optional>
#include <vector>

#include "compiler/shape/infer.h"

namespace kiln::shape {

// Transpose, Concat, Split, Slice, Pad, DepthToSpace, SpaceToDepth, Resize, Upsample.
void RegisterLayoutRules(RuleRegistry& r);
// Compress, NonZero, Unique, ReverseSequence, CenterCropPad, TensorScatter, Det, MaxUnpool,
// Col2Im (rules_select.cc).
void RegisterSelectRules(RuleRegistry& r);

// Product of dims: known when all are known; the single dim itself when there is one
// (so a symbol survives Flatten/Reshape of [N] alone); else unknown.
Dim DimProduct(const std::vector<Dim>& dims);

// Output i copies input 0's shape and dtype `dtype`.
void SetLikeInput(InferContext& ctx, size_t out, DType dtype);

// A constant int input's values, or nullopt when absent or not constant.
std::optional<std::vector<int64_t>> OptionalConstInts(const InferContext& ctx, size_t i);

}  // namespace kiln::shape
