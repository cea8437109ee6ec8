// Deterministic float tensors for tests that compare two computations of the same graph.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "ir/tensor.h"

namespace kiln::testing {

// sin(i * scale) + offset at flat index i: smooth, exact to reproduce.
inline Tensor SineRamp(std::vector<int64_t> shape, double scale, double offset = 0.0) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.SetDouble(i, std::sin(i * scale) + offset);
  return t;
}

// Uniform in [-1, 1] from a seeded LCG: no structure for a product's sums to cancel on (a
// cancelling sum makes any rounding look large against the output's scale).
inline Tensor SeededUniform(std::vector<int64_t> shape, uint64_t seed) {
  Tensor t(DType::kFloat32, std::move(shape));
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    t.SetDouble(i, static_cast<double>((s >> 33) % 20001) / 10000.0 - 1.0);
  }
  return t;
}

}  // namespace kiln::testing
