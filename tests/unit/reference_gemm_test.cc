// The reference interpreter's double-precision product (ops/gemm_f64.h): every
// ISA level and tile edge gives the bits of the plain serial sum, in the same order.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "ops/gemm_f64.h"

namespace kiln::ref {
namespace {

std::vector<double> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = d(rng) * (1 + (rng() % 1000));  // magnitudes that make order matter
  return v;
}

// c += a * b, each element summing p = 0..k-1 (forward) or k-1..0 (backward).
std::vector<double> Serial(const std::vector<double>& a, const std::vector<double>& b,
                           std::vector<double> c, int64_t m, int64_t k, int64_t n, bool forward) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = c[i * n + j];
      for (int64_t q = 0; q < k; ++q) {
        const int64_t p = forward ? q : k - 1 - q;
        const double prod = a[i * k + p] * b[p * n + j];
        s = s + prod;
      }
      c[i * n + j] = s;
    }
  }
  return c;
}

bool SameBits(const std::vector<double>& x, const std::vector<double>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}

struct Dims {
  int64_t m, k, n;
};

// Shapes that hit every tile edge: rows not a multiple of 4/6/8, columns left over after
// 4/8/16-wide tiles, k across several k-blocks, and products big enough to run threaded.
constexpr Dims kShapes[] = {{1, 1, 1},   {1, 300, 1000}, {3, 5, 7},     {7, 257, 19},
                            {13, 64, 33}, {49, 513, 130}, {197, 600, 197}, {100, 40, 1030}};

TEST(ReferenceGemm, EveryLevelGivesTheSerialSumBitForBit) {
  uint32_t seed = 1;
  for (const Dims& d : kShapes) {
    const auto a = Random(d.m * d.k, seed++), b = Random(d.k * d.n, seed++);
    const auto c0 = Random(d.m * d.n, seed++);  // accumulates into what C holds
    const auto want = Serial(a, b, c0, d.m, d.k, d.n, /*forward=*/true);
    for (GemmLevel level : {GemmLevel::kBaseline, GemmLevel::kAvx2, GemmLevel::kAvx512,
                            GemmLevel::kBest}) {
      auto c = c0;
      GemmF64(a.data(), b.data(), c.data(), d.m, d.k, d.n, level);
      EXPECT_TRUE(SameBits(c, want)) << "m=" << d.m << " k=" << d.k << " n=" << d.n
                                     << " level=" << static_cast<int>(level);
    }
  }
}

// The comparison above can tell summation orders apart: the same sum taken backwards
// differs somewhere, so an order-changing kernel (split k, reassociated lanes) would fail.
TEST(ReferenceGemm, AnotherSummationOrderIsCaught) {
  const Dims d{49, 513, 130};
  const auto a = Random(d.m * d.k, 7), b = Random(d.k * d.n, 8);
  const std::vector<double> zero(static_cast<size_t>(d.m * d.n), 0.0);
  auto c = zero;
  GemmF64(a.data(), b.data(), c.data(), d.m, d.k, d.n);
  EXPECT_TRUE(SameBits(c, Serial(a, b, zero, d.m, d.k, d.n, true)));
  EXPECT_FALSE(SameBits(c, Serial(a, b, zero, d.m, d.k, d.n, false)));
}

// Float operands are widened as they load: the bits of the double product on widened copies,
// at every level; and a float rounding of an operand shows (it is not rounded again).
TEST(ReferenceGemm, FloatOperandsGiveTheWidenedProduct) {
  uint32_t seed = 100;
  for (const Dims& d : kShapes) {
    const auto a = Random(d.m * d.k, seed++), b = Random(d.k * d.n, seed++);
    std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
    const std::vector<double> aw(af.begin(), af.end()), bw(bf.begin(), bf.end());
    const std::vector<double> zero(static_cast<size_t>(d.m * d.n), 0.0);
    const auto want = Serial(aw, bw, zero, d.m, d.k, d.n, true);
    for (GemmLevel level : {GemmLevel::kBaseline, GemmLevel::kAvx2, GemmLevel::kAvx512}) {
      auto c = zero;
      GemmF64(af.data(), bf.data(), c.data(), d.m, d.k, d.n, level);
      EXPECT_TRUE(SameBits(c, want)) << "m=" << d.m << " k=" << d.k << " n=" << d.n
                                     << " level=" << static_cast<int>(level);
    }
    if (d.k > 100) {
      EXPECT_FALSE(SameBits(want, Serial(a, b, zero, d.m, d.k, d.n, true)));
    }
  }
}

TEST(ReferenceGemm, EmptyDimensionsLeaveCAlone) {
  std::vector<double> c = {1.5, -2.5};
  const double* none = nullptr;
  GemmF64(none, none, c.data(), 1, 0, 2);
  GemmF64(none, none, c.data(), 0, 3, 2);
  EXPECT_EQ(c, (std::vector<double>{1.5, -2.5}));
}

}  // namespace
}  // namespace kiln::ref
