// y[j] = alpha * dot(a, b + j * ldb) over k elements, for j < n: a row times a matrix stored
// as the rows of its transpose. The attention scores of a decode step (one query row per head
// against the cached keys, q . K^T) are this product, with K changing every step: a GEMM
// would first pack K^T into its panel layout, reading the whole cache twice (measured: 0.49-
// 0.60 ms of a 4-layer decoder's 8-row decode step at a past of 768, per layer, against
// 0.19-0.26 ms for the product with the values, which reads as much). Here every row of b is
// read once, in order, and reduced as it streams.
#pragma once

#include <cstdint>

#include "runtime/cpu/isa.h"

namespace kiln::cpu {

void RowDot(Isa isa, const float* a, const float* b, int64_t ldb, int64_t k, int64_t n, float alpha,
            float* y);

}  // namespace kiln::cpu
