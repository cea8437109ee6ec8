// RowDot (runtime/cpu/row_dot.h) at every ISA level the machine has, against sums in double:
// head sizes with tails at every vector width, a row stride larger than the row, alpha, and a
// NaN in one row that must stay in that output alone.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/cpu/row_dot.h"

namespace kiln::cpu {
namespace {

TEST(RowDot, MatchesDoubleSumsAtEveryLevelAndTail) {
  const Isa top = CpuIsa().detected;
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
    if (isa > top) continue;
    for (int64_t k : {1, 7, 8, 15, 16, 20, 33, 64, 100}) {
      SCOPED_TRACE(testing::Message() << IsaName(isa) << " k " << k);
      const int64_t n = 13, ldb = k + 3;
      std::vector<float> a(static_cast<size_t>(k)), b(static_cast<size_t>(n * ldb), 1e30f);
      for (int64_t p = 0; p < k; ++p) a[p] = std::sin(0.3f * p + 0.1f);
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t p = 0; p < k; ++p) b[j * ldb + p] = std::cos(0.7f * (j * k + p));
      }
      std::vector<float> y(static_cast<size_t>(n));
      RowDot(isa, a.data(), b.data(), ldb, k, n, 0.5f, y.data());
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t p = 0; p < k; ++p) want += double(a[p]) * b[j * ldb + p];
        EXPECT_NEAR(y[j], 0.5 * want, 1e-5 * (1 + std::abs(want))) << "row " << j;
      }
    }
  }
}

TEST(RowDot, ANaNStaysInItsOwnOutput) {
  const int64_t k = 24, n = 3;
  std::vector<float> a(k, 1.f), b(n * k, 2.f);
  b[k + 5] = std::nanf("");
  std::vector<float> y(n);
  RowDot(CpuIsa().detected, a.data(), b.data(), k, k, n, 1.f, y.data());
  EXPECT_EQ(y[0], 48.f);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[2], 48.f);
}

}  // namespace
}  // namespace kiln::cpu
