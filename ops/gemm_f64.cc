#include "ops/gemm_f64.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace kiln::ref {
namespace {

// GCC's vector extensions: the same body compiles to SSE2, AVX2 or AVX-512 by the target of
// the function it is inlined into. This file is built with -ffp-contract=off
// (runtime/CMakeLists.txt), so `acc + x * y` is a multiply and an add at every width.
using V2 = double __attribute__((vector_size(16)));
using V4 = double __attribute__((vector_size(32)));
using V8 = double __attribute__((vector_size(64)));

constexpr int64_t kBlockK = 256;    // a B panel of kBlockK x (tile width) stays in L1/L2
constexpr int64_t kTaskRows = 48;   // a multiple of every level's tile height
constexpr int64_t kTaskCols = 512;  // a multiple of every level's tile width

// The float vector as wide in elements as the double vector V.
using F2 = float __attribute__((vector_size(8)));
using F4 = float __attribute__((vector_size(16)));
using F8 = float __attribute__((vector_size(32)));
template <class V>
struct FloatsOf;
template <>
struct FloatsOf<V2> {
  using type = F2;
};
template <>
struct FloatsOf<V4> {
  using type = F4;
};
template <>
struct FloatsOf<V8> {
  using type = F8;
};

// *v = sizeof(V) / sizeof(double) elements of type E at p, widened to doubles (exactly).
// An out-parameter: returning a vector wider than the baseline ABI's is a psabi change.
template <class V, class E>
[[gnu::always_inline]] inline void Load(const E* p, V* v) {
  if constexpr (std::is_same_v<E, double>) {
    std::memcpy(v, p, sizeof(V));
  } else if constexpr (std::is_same_v<V, double>) {
    *v = static_cast<double>(*p);
  } else {
    typename FloatsOf<V>::type f;
    std::memcpy(&f, p, sizeof(f));
    *v = __builtin_convertvector(f, V);
  }
}

// C[rows x NV*width] += A[rows x kc] * B[kc x NV*width] with C held in registers; V may be a
// plain double (width 1) for the edge columns. A and B may be floats, widened as they load,
// so a float model's weights are never copied to doubles.
template <class V, int MR, int NV, class E>
[[gnu::always_inline]] inline void Tile(const E* a, int64_t lda, const E* b, int64_t ldb, double* c,
                                        int64_t ldc, int64_t kc) {
  constexpr int64_t kW = sizeof(V) / sizeof(double);
  V acc[MR][NV];
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < NV; ++v) std::memcpy(&acc[r][v], c + r * ldc + v * kW, sizeof(V));
  }
  for (int64_t p = 0; p < kc; ++p) {
    V bv[NV];
    for (int v = 0; v < NV; ++v) Load(b + p * ldb + v * kW, &bv[v]);
    for (int r = 0; r < MR; ++r) {
      const double av = static_cast<double>(a[r * lda + p]);
      for (int v = 0; v < NV; ++v) acc[r][v] = acc[r][v] + av * bv[v];
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < NV; ++v) std::memcpy(c + r * ldc + v * kW, &acc[r][v], sizeof(V));
  }
}

template <class E>
struct Block {
  const E* a;
  const E* b;
  double* c;
  int64_t k, n;            // leading dims: a is [. x k], b and c are [. x n]
  int64_t i0, i1, j0, j1;  // the C block this task owns
};

// One task's block of C, k-block by k-block; within a k-block every C tile sees the products
// of that block in order, and the blocks come in order, so each element's sum is the serial
// one.
template <class V, int MR, int NV, class E>
[[gnu::always_inline]] inline void BlockBody(const Block<E>& t) {
  constexpr int64_t kNr = NV * static_cast<int64_t>(sizeof(V) / sizeof(double));
  const int64_t full_j = t.j0 + (t.j1 - t.j0) / kNr * kNr;
  const int64_t full_i = t.i0 + (t.i1 - t.i0) / MR * MR;
  for (int64_t p0 = 0; p0 < t.k; p0 += kBlockK) {
    const int64_t kc = std::min(kBlockK, t.k - p0);
    const E* ap = t.a + p0;
    const E* bp = t.b + p0 * t.n;
    for (int64_t j = t.j0; j < full_j; j += kNr) {
      int64_t i = t.i0;
      for (; i < full_i; i += MR)
        Tile<V, MR, NV>(ap + i * t.k, t.k, bp + j, t.n, t.c + i * t.n + j, t.n, kc);
      for (; i < t.i1; ++i)
        Tile<V, 1, NV>(ap + i * t.k, t.k, bp + j, t.n, t.c + i * t.n + j, t.n, kc);
    }
    for (int64_t j = full_j; j < t.j1; ++j) {
      for (int64_t i = t.i0; i < t.i1; ++i) {
        Tile<double, 1, 1>(ap + i * t.k, t.k, bp + j, t.n, t.c + i * t.n + j, t.n, kc);
      }
    }
  }
}

template <class E>
using BlockFn = void (*)(const Block<E>&);

template <class E>
struct Levels {
#if defined(__GNUC__) && defined(__x86_64__)
  [[gnu::target("avx512f")]] static void Avx512(const Block<E>& t) { BlockBody<V8, 8, 2>(t); }
  [[gnu::target("avx2")]] static void Avx2(const Block<E>& t) { BlockBody<V4, 6, 2>(t); }
#endif
  static void Baseline(const Block<E>& t) { BlockBody<V2, 4, 2>(t); }

  static BlockFn<E> Pick(GemmLevel level) {
#if defined(__GNUC__) && defined(__x86_64__)
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f");
    const bool avx2 = __builtin_cpu_supports("avx2");
    if ((level == GemmLevel::kBest || level == GemmLevel::kAvx512) && avx512) return Avx512;
    if (level != GemmLevel::kBaseline && avx2) return Avx2;
#else
    (void)level;
#endif
    return Baseline;
  }
};

template <class E>
void Gemm(const E* a, const E* b, double* c, int64_t m, int64_t k, int64_t n, GemmLevel level) {
  if (m <= 0 || n <= 0 || k <= 0) return;
  const BlockFn<E> fn = Levels<E>::Pick(level);
  const int64_t row_tasks = (m + kTaskRows - 1) / kTaskRows;
  const int64_t col_tasks = (n + kTaskCols - 1) / kTaskCols;
  const int64_t tasks = row_tasks * col_tasks;
#pragma omp parallel for schedule(dynamic) if (tasks > 1 && m * n * k >= (int64_t{1} << 20))
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t i0 = t / col_tasks * kTaskRows, j0 = t % col_tasks * kTaskCols;
    fn(Block<E>{a, b, c, k, n, i0, std::min(m, i0 + kTaskRows), j0, std::min(n, j0 + kTaskCols)});
  }
}

}  // namespace

void GemmF64(const double* a, const double* b, double* c, int64_t m, int64_t k, int64_t n,
             GemmLevel level) {
  Gemm(a, b, c, m, k, n, level);
}

void GemmF64(const float* a, const float* b, double* c, int64_t m, int64_t k, int64_t n,
             GemmLevel level) {
  Gemm(a, b, c, m, k, n, level);
}

}  // namespace kiln::ref
