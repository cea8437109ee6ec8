// Internal to runtime/cpu/gemm.cc: the register-tiled microkernels, one per ISA level.
#pragma once

#include <cstdint>

#include "runtime/cpu/isa.h"

namespace kiln::cpu::gemm {

// C[r][j] (= or +=) sum_p a[p * mr + r] * b[p * nr + j] for r < rows <= mr, j < cols <= nr.
// `a` is one packed micro-panel (kc x mr, rows past `rows` may hold anything), `b` one packed
// B panel (kc x nr, 64-byte aligned). accumulate: add to C instead of overwriting it.
using MicroKernel = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                             int rows, int cols, bool accumulate);

struct MicroShape {
  int mr, nr;
  MicroKernel kernel;
};

MicroShape MicroFor(Isa isa);

}  // namespace kiln::cpu::gemm
