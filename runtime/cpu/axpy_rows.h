// Vector-matrix products as axpys over the rows of a row-major matrix, for the recurrent
// kernels' per-step updates (h R^T): each output keeps its sum in k order (no reassociated
// sums), so results do not depend on how many rows are computed together.
#pragma once

#include <cstdint>

namespace kiln::cpu {

// out[j] += sum_k in[k] * m[k * ld + j] for j < n.
void AxpyRows(const float* in, int64_t k_count, const float* m, int64_t ld, float* out, int64_t n);

// The most rows AxpyRowsMulti takes at once.
inline constexpr int kMaxAxpyRows = 4;

// out[r][j] += sum_k in[r][k] * m[k * ld + j] for j < n, for `rows` (1..kMaxAxpyRows)
// vectors at once. Each row of m is read once for all of them, which is what a batch of
// sequences stepping together saves; every output equals the one-row call's bit for bit.
void AxpyRowsMulti(const float* const* in, int rows, int64_t k_count, const float* m, int64_t ld,
                   float* const* out, int64_t n);

}  // namespace kiln::cpu
