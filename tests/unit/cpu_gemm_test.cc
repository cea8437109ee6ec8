// Kiln's own GEMM (runtime/cpu/gemm.h) against a double-precision triple loop, at every ISA
// level this CPU (and the KILN_MAX_CPU_ISA cap) allows: edge sizes around every tile and block
// size, strided (transposed) operands, alpha, batches, the tile hook's coverage, K == 0.
#include "runtime/cpu/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

namespace kiln::cpu {
namespace {

struct Aligned {
  explicit Aligned(int64_t n) : p(static_cast<float*>(std::aligned_alloc(64, ((n * 4 + 63) / 64) * 64 + 64))) {}
  ~Aligned() { std::free(p); }
  float* p;
};

std::vector<float> Random(int64_t n, int seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<Isa> Levels() {
  std::vector<Isa> out;
  for (Isa i : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
    if (i <= ActiveIsa()) out.push_back(i);
  }
  return out;
}

// C = alpha * op(A) * op(B) through the library, compared with doubles.
void CheckProduct(Isa isa, int64_t m, int64_t n, int64_t k, bool ta, bool tb, float alpha) {
  SCOPED_TRACE(testing::Message() << IsaName(isa) << " m=" << m << " n=" << n << " k=" << k
                                  << " ta=" << ta << " tb=" << tb);
  const gemm::Blocking bl = gemm::BlockingFor(isa);
  std::vector<float> a = Random(m * k, 1), b = Random(k * n, 2);
  const gemm::View av{a.data(), ta ? 1 : k, ta ? m : 1};
  const gemm::View bv{b.data(), tb ? 1 : n, tb ? k : 1};
  Aligned packed(gemm::PackedBFloats(bl, k, n));
  gemm::PackB(bl, bv, k, n, 1.f, packed.p);
  Aligned apack(2 * gemm::APackFloats(bl));
  std::vector<float> c(m * n, -7.f);
  std::vector<int> covered(m * n, 0);
  gemm::Problem pr{av, packed.p, c.data(), n, alpha};
  gemm::Run(bl, &pr, 1, m, n, k, /*parallel=*/true, 2, apack.p,
            [&](int64_t p, int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
              EXPECT_EQ(p, 0);
              for (int64_t i = i0; i < i0 + rows; ++i) {
                for (int64_t j = j0; j < j0 + cols; ++j) covered[i * n + j]++;
              }
            });
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t p = 0; p < k; ++p) {
        want += static_cast<double>(a[i * av.rs + p * av.cs]) * b[p * bv.rs + j * bv.cs];
      }
      want *= alpha;
      ASSERT_NEAR(c[i * n + j], want, 1e-5 * (1 + std::sqrt(static_cast<double>(k))))
          << "at " << i << "," << j;
      ASSERT_EQ(covered[i * n + j], 1) << "tile hook at " << i << "," << j;
    }
  }
}

TEST(CpuGemm, MatchesDoublePrecisionAtEveryLevelAndEdge) {
  for (Isa isa : Levels()) {
    for (int64_t m : {1, 5, 6, 7, 12, 13, 97}) {
      for (int64_t n : {1, 8, 15, 16, 17, 33, 70}) {
        for (int64_t k : {1, 3, 64, 257}) CheckProduct(isa, m, n, k, false, false, 1.f);
      }
    }
  }
}

TEST(CpuGemm, StridedOperandsAndAlpha) {
  for (Isa isa : Levels()) {
    CheckProduct(isa, 19, 23, 300, true, false, 1.f);
    CheckProduct(isa, 19, 23, 300, false, true, 0.5f);
    CheckProduct(isa, 200, 9, 31, true, true, -2.f);
  }
}

TEST(CpuGemm, EmptyKGivesZerosAndStillCallsTheHook) {
  for (Isa isa : Levels()) {
    const gemm::Blocking bl = gemm::BlockingFor(isa);
    Aligned packed(gemm::PackedBFloats(bl, 0, 5));
    Aligned apack(gemm::APackFloats(bl));
    std::vector<float> c(3 * 5, 9.f);
    gemm::Problem pr{{nullptr, 0, 1}, packed.p, c.data(), 5, 1.f};
    int calls = 0;
    gemm::Run(bl, &pr, 1, 3, 5, 0, false, 1, apack.p,
              [&](int64_t, int64_t, int64_t, int64_t, int64_t) { ++calls; });
    for (float v : c) EXPECT_EQ(v, 0.f);
    EXPECT_GT(calls, 0);
  }
}

TEST(CpuGemm, BatchOfProblemsEachWrittenOnce) {
  for (Isa isa : Levels()) {
    const gemm::Blocking bl = gemm::BlockingFor(isa);
    const int64_t m = 7, n = 20, k = 9, count = 3;
    std::vector<float> a = Random(count * m * k, 3), b = Random(k * n, 4);
    Aligned packed(gemm::PackedBFloats(bl, k, n));
    gemm::PackB(bl, {b.data(), n, 1}, k, n, 1.f, packed.p);
    Aligned apack(2 * gemm::APackFloats(bl));
    std::vector<float> c(count * m * n, 0.f);
    std::vector<gemm::Problem> prs;
    for (int64_t p = 0; p < count; ++p) {
      prs.push_back({{a.data() + p * m * k, k, 1}, packed.p, c.data() + p * m * n, n, 1.f});
    }
    gemm::Run(bl, prs.data(), count, m, n, k, true, 2, apack.p, {});
    for (int64_t p = 0; p < count; ++p) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double want = 0;
          for (int64_t q = 0; q < k; ++q) want += double(a[p * m * k + i * k + q]) * b[q * n + j];
          ASSERT_NEAR(c[p * m * n + i * n + j], want, 1e-5);
        }
      }
    }
  }
}

// NaN and infinities flow through the products as IEEE arithmetic says (no max/min here that
// could drop them).
TEST(CpuGemm, NonFiniteValuesPropagate) {
  for (Isa isa : Levels()) {
    const gemm::Blocking bl = gemm::BlockingFor(isa);
    std::vector<float> a = {NAN, 1.f, 1.f, 1.f, INFINITY, 0.f};  // 3 x 2
    std::vector<float> b = {1.f, 2.f, 3.f, 4.f};                  // 2 x 2
    Aligned packed(gemm::PackedBFloats(bl, 2, 2));
    gemm::PackB(bl, {b.data(), 2, 1}, 2, 2, 1.f, packed.p);
    Aligned apack(gemm::APackFloats(bl));
    std::vector<float> c(6);
    gemm::Problem pr{{a.data(), 2, 1}, packed.p, c.data(), 2, 1.f};
    gemm::Run(bl, &pr, 1, 3, 2, 2, false, 1, apack.p, {});
    EXPECT_TRUE(std::isnan(c[0]) && std::isnan(c[1]));
    EXPECT_EQ(c[2], 4.f);
    EXPECT_TRUE(std::isinf(c[4]) && c[4] > 0);
  }
}

TEST(CpuIsa, CapNamesParse) {
  EXPECT_EQ(ParseIsa("AVX2"), Isa::kAvx2);
  EXPECT_EQ(ParseIsa("avx512_core_bf16"), Isa::kAvx512);
  EXPECT_EQ(ParseIsa("SSE41"), Isa::kBaseline);
  EXPECT_EQ(ParseIsa("all"), Isa::kAvx512);
  EXPECT_FALSE(ParseIsa("avx1024").has_value());
  EXPECT_LE(CpuIsa().active, CpuIsa().detected);
  EXPECT_EQ(CpuIsa().channel_block, CpuIsa().active == Isa::kAvx512 ? 16 : 8);
}

// Under KILN_MAX_CPU_ISA the own kernels and oneDNN run at the capped level (ctest runs the
// CPU tests again with avx2 for this).
TEST(CpuIsa, TheCapReachesBothLibraries) {
  const char* cap = std::getenv("KILN_MAX_CPU_ISA");
  if (!cap) GTEST_SKIP() << "KILN_MAX_CPU_ISA is not set";
  const std::optional<Isa> want = ParseIsa(cap);
  ASSERT_TRUE(want.has_value());
  EXPECT_LE(CpuIsa().active, *want);
  if (*want == Isa::kAvx2) {
    EXPECT_EQ(CpuIsa().onednn.rfind("avx512", 0), std::string::npos) << CpuIsa().onednn;
  }
}

}  // namespace
}  // namespace kiln::cpu
