#include "runtime/cpu/axpy_rows.h"

#include "runtime/cpu/isa.h"

namespace kiln::cpu {
namespace {

// R rows at once, compiled per ISA level (isa.h). Columns go in blocks of 32 kept in
// registers across k (R x 32 accumulators: 8 AVX-512 or 16 AVX2 vectors for four rows), so
// out is loaded and stored once per block, not once per k; each sum keeps its k order.
template <int R>
KILN_ISA_BODY void AxpyRowsR(const float* const* in, int64_t k_count, const float* m, int64_t ld,
                             float* const* out, int64_t n) {
  constexpr int64_t kCols = 32;
  int64_t j0 = 0;
  for (; j0 + kCols <= n; j0 += kCols) {
    float acc[R][kCols];
    for (int r = 0; r < R; ++r) {
      for (int64_t j = 0; j < kCols; ++j) acc[r][j] = out[r][j0 + j];
    }
    for (int64_t k = 0; k < k_count; ++k) {
      const float* row = m + k * ld + j0;
      for (int r = 0; r < R; ++r) {
        const float v = in[r][k];
        for (int64_t j = 0; j < kCols; ++j) acc[r][j] += v * row[j];
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int64_t j = 0; j < kCols; ++j) out[r][j0 + j] = acc[r][j];
    }
  }
  for (int r = 0; r < R && j0 < n; ++r) {
    for (int64_t k = 0; k < k_count; ++k) {
      const float v = in[r][k];
      const float* row = m + k * ld;
      for (int64_t j = j0; j < n; ++j) out[r][j] += v * row[j];
    }
  }
}

KILN_ISA_BODY void AxpyRowsMultiBody(const float* const* in, int rows, int64_t k_count,
                                     const float* m, int64_t ld, float* const* out, int64_t n) {
  switch (rows) {
    case 4:
      return AxpyRowsR<4>(in, k_count, m, ld, out, n);
    case 3:
      return AxpyRowsR<3>(in, k_count, m, ld, out, n);
    case 2:
      return AxpyRowsR<2>(in, k_count, m, ld, out, n);
    default:
      return AxpyRowsR<1>(in, k_count, m, ld, out, n);
  }
}

}  // namespace

KILN_ISA_VERSIONS(void, AxpyRowsMulti,
                  (const float* const* in, int rows, int64_t k_count, const float* m, int64_t ld,
                   float* const* out, int64_t n),
                  (in, rows, k_count, m, ld, out, n))

}  // namespace kiln::cpu
