// Helpers for inference rules: symbolic broadcasting and axis handling.
#pragma once

#include <optional>
#include <vector>

#include "compiler/shape/infer.h"

namespace kiln::shape {

// Numpy broadcasting over symbolic dims. A known 1 yields to the other dim; two different
// symbols (or unknowns) yield an unknown dim; two different known sizes > 1 are an error.
absl::StatusOr<Shape> BroadcastShapes(const InferContext& ctx, const std::vector<Shape>& shapes);
// Broadcast of all present inputs; nullopt if any present input has unknown rank.
absl::StatusOr<std::optional<Shape>> BroadcastInputs(const InferContext& ctx);

absl::StatusOr<int64_t> NormalizeAxis(const InferContext& ctx, int64_t axis, int64_t rank);
// Reads a constant int64 input (e.g. axes, shape); nullopt when the input is not constant.
std::optional<std::vector<int64_t>> ConstantInts(const InferContext& ctx, size_t i);

// Output 0 has input 0's dtype and shape (normalizations, softmaxes, scatters, Trilu, ...).
absl::Status SameAsInputRule(InferContext& ctx);
// Shape with every dim unknown.
Shape UnknownDims(int64_t rank);

}  // namespace kiln::shape
