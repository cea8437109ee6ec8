// Kiln's own single-precision GEMM: C = A * B, blocked as BLIS does (B in panels of NR
// columns, A packed per MC x KC block into micro-panels of MR rows, a register-tiled
// microkernel per ISA level: AVX-512 12 x 32, AVX2+FMA 6 x 16, baseline 4 x 8).
//
// Why not oneDNN's matmul everywhere: on CPUs without AVX-512, oneDNN 2.6 runs f32 matmul on
// its gemm driver, which mallocs its packing buffers on every call (bert_tiny b8: 141
// allocations per run) and cannot be capped to a level for tests. Here every buffer is
// planned at build (the packed B of a constant weight once, the A/B packing space in the
// engine's arena), the level follows ActiveIsa(), and the epilogue runs on each finished
// tile while it is in cache, with the own element-wise ops' IEEE semantics (NaN stays NaN).
#pragma once

#include <cstdint>
#include <functional>

#include "runtime/cpu/isa.h"

namespace kiln::cpu::gemm {

struct Blocking {
  Isa isa = Isa::kBaseline;
  int mr = 4, nr = 8;     // microkernel tile
  int64_t kc = 256;       // K block (a B panel of kc x nr stays in L1)
  int64_t mc = 96;        // M block (the packed A block of mc x kc stays in L2)
};
Blocking BlockingFor(Isa isa);

// A matrix: element (i, j) at data[i * rs + j * cs].
struct View {
  const float* data = nullptr;
  int64_t rs = 0, cs = 0;
};

// B in panel layout: for each K block of kc rows, for each panel of nr columns, kc x nr
// floats (row-major in the panel), columns past n zero. alpha scales every element.
int64_t PackedBFloats(const Blocking& bl, int64_t k, int64_t n);
void PackB(const Blocking& bl, View b, int64_t k, int64_t n, float alpha, float* out);

// Floats of A packing space one thread needs (one mc x kc block).
int64_t APackFloats(const Blocking& bl);

// One product of a batch: C (m x n, row stride ldc, unit column stride) = alpha * A * B,
// B already packed with PackB (alpha folded in there, or given here for A's packing).
struct Problem {
  View a;
  const float* b_packed = nullptr;
  float* c = nullptr;
  int64_t ldc = 0;
  float alpha = 1.f;  // applied while packing A (1 when folded into B)
};

// Called once per finished microtile (all of K accumulated) with problem index, rows
// [i0, i0 + rows) and columns [j0, j0 + cols): the epilogue's hook. May be empty.
using TileFn = std::function<void(int64_t p, int64_t i0, int64_t rows, int64_t j0, int64_t cols)>;

// Runs every problem (all m x n x k) over a grid of (problem, M block, N range) items cut
// across the OpenMP team when `parallel`. `a_pack` holds threads x APackFloats(bl) floats,
// 64-byte aligned. K == 0 gives zeros.
void Run(const Blocking& bl, const Problem* problems, int64_t count, int64_t m, int64_t n,
         int64_t k, bool parallel, int threads, float* a_pack, const TileFn& tile);

}  // namespace kiln::cpu::gemm
