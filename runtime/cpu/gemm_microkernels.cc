// The microkernels: an R x NR tile of C kept in vector registers over the whole K block.
// Each is a template on R (the rows a call really has, R <= MR), so the one-row products of a
// batch-1 classifier do not pay for MR rows. Products use FMA where the level has it, so the
// levels round differently in the last bit: the warm-up check's tolerance covers that.
#include "runtime/cpu/gemm_microkernels.h"

#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12 flags its own avx512fintrin.h (`__Y = __Y` in _mm512_undefined_*) as uninitialized
// once those helpers inline (GCC bug 105593); the warning is about the header only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define KILN_GEMM_X86 1
#endif

namespace kiln::cpu::gemm {
namespace {

// Dispatches rows (1..MR) to the template instance.
template <int MR, template <int> class K>
MicroKernel ForRows(int rows) {
  static constexpr MicroKernel kTable[] = {
      nullptr, K<1>::Run, K<(MR >= 2 ? 2 : 1)>::Run, K<(MR >= 3 ? 3 : 1)>::Run,
      K<(MR >= 4 ? 4 : 1)>::Run, K<(MR >= 5 ? 5 : 1)>::Run, K<(MR >= 6 ? 6 : 1)>::Run,
      K<(MR >= 7 ? 7 : 1)>::Run, K<(MR >= 8 ? 8 : 1)>::Run, K<(MR >= 9 ? 9 : 1)>::Run,
      K<(MR >= 10 ? 10 : 1)>::Run, K<(MR >= 11 ? 11 : 1)>::Run, K<(MR >= 12 ? 12 : 1)>::Run};
  return kTable[rows];
}

// Accumulator sets over K for an R-row tile: at least 8 independent FMA chains (two vectors
// per row), enough to cover a 4-cycle FMA latency on two ports.
constexpr int ChainsFor(int rows) { return rows >= 4 ? 1 : rows == 1 ? 4 : 2; }

// ---- baseline x86-64 (SSE2 by the compiler's vectorizer): 4 x 8 ----
constexpr int kBaseMr = 4, kBaseNr = 8;

template <int R>
struct BaseTile {
  static void Run(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int,
                  int cols, bool acc) {
    float t[R][kBaseNr] = {};
    for (int64_t p = 0; p < kc; ++p, a += kBaseMr, b += kBaseNr) {
      for (int r = 0; r < R; ++r) {
        for (int j = 0; j < kBaseNr; ++j) t[r][j] += a[r] * b[j];
      }
    }
    for (int r = 0; r < R; ++r) {
      float* row = c + r * ldc;
      for (int j = 0; j < cols; ++j) row[j] = acc ? row[j] + t[r][j] : t[r][j];
    }
  }
};

void BaseKernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int rows,
                int cols, bool acc) {
  ForRows<kBaseMr, BaseTile>(rows)(kc, a, b, c, ldc, rows, cols, acc);
}

#ifdef KILN_GEMM_X86
// ---- AVX2 + FMA: 6 x 16 (12 accumulators, 2 B vectors, 1 broadcast) ----
constexpr int kAvx2Mr = 6, kAvx2Nr = 16;

template <int R>
struct Avx2Tile {
  [[gnu::target("avx2,fma")]] static void Run(int64_t kc, const float* a, const float* b,
                                              float* c, int64_t ldc, int, int cols, bool acc) {
    // Few rows give few independent FMA chains: those tiles also split K over U sets of
    // accumulators (summed at the end), so the FMA latency is covered.
    constexpr int U = ChainsFor(R);
    __m256 c0[U][R], c1[U][R];
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r) c0[u][r] = c1[u][r] = _mm256_setzero_ps();
    }
    int64_t p = 0;
    for (; p + U <= kc; p += U) {
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u, a += kAvx2Mr, b += kAvx2Nr) {
        const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; ++r) {
          const __m256 av = _mm256_broadcast_ss(a + r);
          c0[u][r] = _mm256_fmadd_ps(av, b0, c0[u][r]);
          c1[u][r] = _mm256_fmadd_ps(av, b1, c1[u][r]);
        }
      }
    }
    for (; p < kc; ++p, a += kAvx2Mr, b += kAvx2Nr) {
      const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r) {
        const __m256 av = _mm256_broadcast_ss(a + r);
        c0[0][r] = _mm256_fmadd_ps(av, b0, c0[0][r]);
        c1[0][r] = _mm256_fmadd_ps(av, b1, c1[0][r]);
      }
    }
#pragma GCC unroll 8
    for (int u = 1; u < U; ++u) {
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r) {
        c0[0][r] = _mm256_add_ps(c0[0][r], c0[u][r]);
        c1[0][r] = _mm256_add_ps(c1[0][r], c1[u][r]);
      }
    }
    if (cols == kAvx2Nr) {
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r) {
        float* row = c + r * ldc;
        if (acc) {
          c0[0][r] = _mm256_add_ps(c0[0][r], _mm256_loadu_ps(row));
          c1[0][r] = _mm256_add_ps(c1[0][r], _mm256_loadu_ps(row + 8));
        }
        _mm256_storeu_ps(row, c0[0][r]);
        _mm256_storeu_ps(row + 8, c1[0][r]);
      }
      return;
    }
    // A partial last panel goes through a tile buffer (every register index stays constant,
    // so the accumulators are never spilled to be indexed).
    alignas(32) float t[R][kAvx2Nr];
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      _mm256_store_ps(t[r], c0[0][r]);
      _mm256_store_ps(t[r] + 8, c1[0][r]);
    }
    for (int r = 0; r < R; ++r) {
      float* row = c + r * ldc;
      for (int j = 0; j < cols; ++j) row[j] = acc ? row[j] + t[r][j] : t[r][j];
    }
  }
};

void Avx2Kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int rows,
                int cols, bool acc) {
  ForRows<kAvx2Mr, Avx2Tile>(rows)(kc, a, b, c, ldc, rows, cols, acc);
}

// ---- AVX-512: 12 x 32 (24 accumulators, 2 B vectors, broadcasts folded into the FMAs) ----
constexpr int kAvx512Mr = 12, kAvx512Nr = 32;

template <int R>
struct Avx512Tile {
  [[gnu::target("avx512f")]] static void Run(int64_t kc, const float* a, const float* b,
                                             float* c, int64_t ldc, int, int cols, bool acc) {
    constexpr int U = ChainsFor(R);
    __m512 c0[U][R], c1[U][R];
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) c0[u][r] = c1[u][r] = _mm512_setzero_ps();
    }
    int64_t p = 0;
    for (; p + U <= kc; p += U) {
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u, a += kAvx512Mr, b += kAvx512Nr) {
        const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 12
        for (int r = 0; r < R; ++r) {
          const __m512 av = _mm512_set1_ps(a[r]);
          c0[u][r] = _mm512_fmadd_ps(av, b0, c0[u][r]);
          c1[u][r] = _mm512_fmadd_ps(av, b1, c1[u][r]);
        }
      }
    }
    for (; p < kc; ++p, a += kAvx512Mr, b += kAvx512Nr) {
      const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        const __m512 av = _mm512_set1_ps(a[r]);
        c0[0][r] = _mm512_fmadd_ps(av, b0, c0[0][r]);
        c1[0][r] = _mm512_fmadd_ps(av, b1, c1[0][r]);
      }
    }
#pragma GCC unroll 8
    for (int u = 1; u < U; ++u) {
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        c0[0][r] = _mm512_add_ps(c0[0][r], c0[u][r]);
        c1[0][r] = _mm512_add_ps(c1[0][r], c1[u][r]);
      }
    }
    const auto mask = [](int n) {
      return static_cast<__mmask16>(n >= 16 ? 0xffffu : n <= 0 ? 0u : (1u << n) - 1u);
    };
    const __mmask16 m0 = mask(cols), m1 = mask(cols - 16);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      float* row = c + r * ldc;
      if (acc) {
        c0[0][r] = _mm512_add_ps(c0[0][r], _mm512_maskz_loadu_ps(m0, row));
        c1[0][r] = _mm512_add_ps(c1[0][r], _mm512_maskz_loadu_ps(m1, row + 16));
      }
      _mm512_mask_storeu_ps(row, m0, c0[0][r]);
      _mm512_mask_storeu_ps(row + 16, m1, c1[0][r]);
    }
  }
};

void Avx512Kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int rows,
                  int cols, bool acc) {
  ForRows<kAvx512Mr, Avx512Tile>(rows)(kc, a, b, c, ldc, rows, cols, acc);
}
#endif

}  // namespace

MicroShape MicroFor(Isa isa) {
#ifdef KILN_GEMM_X86
  if (isa == Isa::kAvx512) return {kAvx512Mr, kAvx512Nr, Avx512Kernel};
  if (isa == Isa::kAvx2) return {kAvx2Mr, kAvx2Nr, Avx2Kernel};
#endif
  (void)isa;
  return {kBaseMr, kBaseNr, BaseKernel};
}

}  // namespace kiln::cpu::gemm
