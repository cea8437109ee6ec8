#include "runtime/cpu/row_dot.h"

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12 flags its own avx512fintrin.h as uninitialized once its helpers inline (GCC bug
// 105593), as in gemm_microkernels.cc.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define KILN_ROW_DOT_X86 1
#endif

namespace kiln::cpu {
namespace {

// Four partial sums (k in steps of 4), added in a fixed order.
void RowDotBaseline(const float* a, const float* b, int64_t ldb, int64_t k, int64_t n, float alpha,
                    float* y) {
  for (int64_t j = 0; j < n; ++j) {
    const float* r = b + j * ldb;
    float s[4] = {0, 0, 0, 0};
    int64_t p = 0;
    for (; p + 4 <= k; p += 4) {
      for (int u = 0; u < 4; ++u) s[u] += a[p + u] * r[p + u];
    }
    for (; p < k; ++p) s[0] += a[p] * r[p];
    y[j] = alpha * ((s[0] + s[1]) + (s[2] + s[3]));
  }
}

#ifdef KILN_ROW_DOT_X86
[[gnu::target("avx2,fma")]] float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

[[gnu::target("avx2,fma")]] void RowDotAvx2(const float* a, const float* b, int64_t ldb, int64_t k,
                                            int64_t n, float alpha, float* y) {
  const int64_t whole = k / 8 * 8;
  for (int64_t j = 0; j < n; ++j) {
    const float* r = b + j * ldb;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t p = 0;
    for (; p + 16 <= whole; p += 16) {
      s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p), _mm256_loadu_ps(r + p), s0);
      s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p + 8), _mm256_loadu_ps(r + p + 8), s1);
    }
    if (p < whole) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p), _mm256_loadu_ps(r + p), s0);
    float s = HorizontalSum(_mm256_add_ps(s0, s1));
    for (p = whole; p < k; ++p) s += a[p] * r[p];
    y[j] = alpha * s;
  }
}

[[gnu::target("avx512f")]] void RowDotAvx512(const float* a, const float* b, int64_t ldb, int64_t k,
                                             int64_t n, float alpha, float* y) {
  const int64_t whole = k / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (k - whole)) - 1u);
  for (int64_t j = 0; j < n; ++j) {
    const float* r = b + j * ldb;
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t p = 0;
    for (; p + 32 <= whole; p += 32) {
      s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + p), _mm512_loadu_ps(r + p), s0);
      s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + p + 16), _mm512_loadu_ps(r + p + 16), s1);
    }
    if (p < whole) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + p), _mm512_loadu_ps(r + p), s0);
    if (tail) {
      s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, a + whole),
                           _mm512_maskz_loadu_ps(tail, r + whole), s1);
    }
    y[j] = alpha * _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
  }
}
#endif

}  // namespace

void RowDot(Isa isa, const float* a, const float* b, int64_t ldb, int64_t k, int64_t n, float alpha,
            float* y) {
#ifdef KILN_ROW_DOT_X86
  if (isa == Isa::kAvx512) return RowDotAvx512(a, b, ldb, k, n, alpha, y);
  if (isa == Isa::kAvx2) return RowDotAvx2(a, b, ldb, k, n, alpha, y);
#endif
  RowDotBaseline(a, b, ldb, k, n, alpha, y);
}

}  // namespace kiln::cpu
