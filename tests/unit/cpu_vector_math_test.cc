// The CPU engine's vectorizable exp/tanh/erf (runtime/cpu/vector_math.h) against libm over
// dense sweeps, and at the edges: overflow, underflow, infinities and NaN.
#include "runtime/cpu/vector_math.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace kiln::cpu::vmath {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// Distance in units in the last place between two finite floats of the same sign.
int64_t Ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::llabs(static_cast<int64_t>(ia) - ib);
}

TEST(VectorMath, ExpWithinTwoUlpsOverItsRange) {
  int64_t worst = 0;
  for (float x = -87.f; x < 88.7f; x += 0.00137f) {
    const float want = static_cast<float>(std::exp(static_cast<double>(x)));
    worst = std::max(worst, Ulps(Exp(x), want));
  }
  EXPECT_LE(worst, 2);
}

TEST(VectorMath, ExpEdges) {
  EXPECT_EQ(Exp(0.f), 1.f);
  EXPECT_EQ(Exp(-200.f), 0.f);
  EXPECT_EQ(Exp(-kInf), 0.f);
  EXPECT_EQ(Exp(89.f), kInf);
  EXPECT_EQ(Exp(kInf), kInf);
  EXPECT_TRUE(std::isnan(Exp(kNan)));
  // Denormal results (expf goes down to ~1.4e-45 near x = -103.3).
  EXPECT_NEAR(Exp(-100.f), std::exp(-100.f), 1e-45);
  EXPECT_GT(Exp(-100.f), 0.f);
  EXPECT_NEAR(Exp(88.5f) / std::exp(88.5f), 1.f, 1e-6);
}

TEST(VectorMath, TanhAndErfWithinTolerance) {
  double tanh_abs = 0, tanh_rel = 0, erf_abs = 0, erf_rel = 0;
  for (float x = -12.f; x < 12.f; x += 0.000731f) {
    const double t = std::tanh(static_cast<double>(x)), e = std::erf(static_cast<double>(x));
    tanh_abs = std::max(tanh_abs, std::fabs(Tanh(x) - t));
    erf_abs = std::max(erf_abs, std::fabs(Erf(x) - e));
    if (std::fabs(x) > 1e-30) {
      tanh_rel = std::max(tanh_rel, std::fabs(Tanh(x) - t) / std::fabs(t));
      erf_rel = std::max(erf_rel, std::fabs(Erf(x) - e) / std::fabs(e));
    }
  }
  EXPECT_LT(tanh_abs, 3e-7);
  EXPECT_LT(tanh_rel, 2e-6);
  EXPECT_LT(erf_abs, 3e-7);
  EXPECT_LT(erf_rel, 2e-6);
  // Tiny arguments keep their relative accuracy (both are ~linear there).
  EXPECT_NEAR(Tanh(1e-20f) / 1e-20f, 1.f, 1e-6);
  EXPECT_NEAR(Erf(1e-20f) / (1e-20f * 1.1283791670955126f), 1.f, 1e-6);
}

TEST(VectorMath, TanhAndErfEdges) {
  EXPECT_EQ(Tanh(0.f), 0.f);
  EXPECT_EQ(Tanh(kInf), 1.f);
  EXPECT_EQ(Tanh(-kInf), -1.f);
  EXPECT_EQ(Tanh(-30.f), -1.f);
  EXPECT_TRUE(std::isnan(Tanh(kNan)));
  EXPECT_EQ(Erf(0.f), 0.f);
  EXPECT_EQ(Erf(kInf), 1.f);
  EXPECT_EQ(Erf(-kInf), -1.f);
  EXPECT_EQ(Erf(-9.f), -1.f);
  EXPECT_TRUE(std::isnan(Erf(kNan)));
}

}  // namespace
}  // namespace kiln::cpu::vmath
