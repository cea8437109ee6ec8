// The reference interpreter's double-precision matrix product (Gemm, MatMul, and whatever
// else lowers to a product). It is the oracle the optimized engines are checked against, so
// its result must not depend on the machine: every element of C adds its k products in
// order p = 0, 1, ..., k-1, each product rounded once and then added (never a fused
// multiply-add), at every ISA level and thread count. The levels differ only in speed: a
// register tile of C stays in vector registers across a block of k, instead of a row of C
// being loaded and stored once per product.
#pragma once

#include <cstdint>

namespace kiln::ref {

enum class GemmLevel { kBest, kBaseline, kAvx2, kAvx512 };

// c[m x n] += a[m x k] * b[k x n], all row-major and dense. kBest picks the widest level the
// CPU runs; a level the CPU lacks falls back to the next lower one. Large products split
// their tiles over the OpenMP team (tiles are disjoint, so the bits stay the same). Float
// operands are widened as they are read (exactly), so the float overload gives the bits the
// double one gives on the widened copies, without making them.
void GemmF64(const double* a, const double* b, double* c, int64_t m, int64_t k, int64_t n,
             GemmLevel level = GemmLevel::kBest);
void GemmF64(const float* a, const float* b, double* c, int64_t m, int64_t k, int64_t n,
             GemmLevel level = GemmLevel::kBest);

}  // namespace kiln::ref
