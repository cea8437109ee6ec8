// Index arithmetic shared by the emitters. A kernel walks an iteration space (usually the
// output's shape) with one linear index; every operand is read or written at
// base + sum(coordinate[d] * stride[d]). Broadcast dims have stride 0, a transpose permutes
// strides, a slice starts at a base with scaled (possibly negative) strides. Dims are merged
// where every operand walks them contiguously, so a kernel decomposes as few coordinates as
// the operands need (none when all operands are dense).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::codegen {

struct IndexSpace {
  std::vector<int64_t> dims;                  // outer first; empty: a single element
  std::vector<std::vector<int64_t>> strides;  // [operand][dim], in elements
  std::vector<int64_t> bases;                 // [operand], in elements
};

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& shape);
// Strides of a row-major tensor of shape `in` read in the index space of `out` under numpy
// broadcasting (right-aligned, 0 along broadcast dims); nullopt when they do not broadcast.
std::optional<std::vector<int64_t>> BroadcastStrides(const std::vector<int64_t>& in,
                                                     const std::vector<int64_t>& out);
// Drops size-1 dims and merges neighbours that every operand walks contiguously.
IndexSpace Coalesce(IndexSpace space);
// Whether operand k is read at exactly the linear index (row-major strides, base 0).
bool IsLinear(const IndexSpace& space, size_t k);
int64_t Elements(const IndexSpace& space);
// "int" when every index and offset (and the grid-stride loop's overshoot) fits in 31 bits,
// else "long long".
std::string IndexType(const IndexSpace& space);

// The code that computes operand offsets from the linear index `index` (a variable of
// IndexType): `lines` declare the coordinates the operands need (c0, c1, ...), `offsets[k]`
// is an expression for operand k.
struct OffsetCode {
  std::vector<std::string> lines;
  std::vector<std::string> offsets;
};
OffsetCode EmitOffsets(const IndexSpace& space, const std::string& index);

}  // namespace kiln::codegen
