// The CPU engine's layout copy between dense strided layouts (runtime/cpu/strided_copy.h),
// against an element-by-element walk of the same index space.
#include "runtime/cpu/strided_copy.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::cpu {
namespace {

// Strides of a dense layout whose dims, outermost first, are `order`.
std::vector<int64_t> StridesFor(const std::vector<int64_t>& dims, const std::vector<int>& order) {
  std::vector<int64_t> strides(dims.size());
  int64_t s = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = s;
    s *= dims[*it];
  }
  return strides;
}

// Copies every logical index from src's layout to dst's, one element at a time.
template <class T>
std::vector<T> Reference(const std::vector<T>& src, const std::vector<int64_t>& dims,
                         const std::vector<int64_t>& ss, const std::vector<int64_t>& ds) {
  std::vector<T> dst(src.size());
  std::vector<int64_t> idx(dims.size(), 0);
  for (size_t n = 0; n < src.size(); ++n) {
    int64_t so = 0, doff = 0;
    for (size_t d = 0; d < dims.size(); ++d) {
      so += idx[d] * ss[d];
      doff += idx[d] * ds[d];
    }
    dst[doff] = src[so];
    for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
  return dst;
}

template <class T>
void ExpectCopies(const std::vector<int64_t>& dims, const std::vector<int>& src_order,
                  const std::vector<int>& dst_order) {
  const auto ss = StridesFor(dims, src_order), ds = StridesFor(dims, dst_order);
  const int64_t n = std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
  std::vector<T> src(n);
  for (int64_t i = 0; i < n; ++i) src[i] = static_cast<T>(i * 2654435761u + 7);
  auto plan = StridedCopy::Plan(dims, ss, ds, sizeof(T));
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->elements(), n);
  std::vector<T> got(n, T{0});
  plan->Run(src.data(), got.data());
  EXPECT_EQ(got, Reference(src, dims, ss, ds));
}

TEST(StridedCopy, ChannelsFirstToLastAndBack) {
  ExpectCopies<float>({2, 3, 17, 19}, {0, 1, 2, 3}, {0, 2, 3, 1});   // NCHW -> NHWC
  ExpectCopies<float>({2, 40, 7, 7}, {0, 2, 3, 1}, {0, 1, 2, 3});    // NHWC -> NCHW
  ExpectCopies<float>({3, 5, 31}, {0, 1, 2}, {0, 2, 1});             // NCW -> NWC
  ExpectCopies<float>({1, 4, 3, 5, 6}, {0, 1, 2, 3, 4}, {0, 2, 3, 4, 1});  // NCDHW -> NDHWC
}

TEST(StridedCopy, LargeEnoughToSplitAcrossThreads) {
  ExpectCopies<float>({1, 3, 224, 224}, {0, 1, 2, 3}, {0, 2, 3, 1});
  ExpectCopies<float>({4, 256, 14, 14}, {0, 2, 3, 1}, {0, 1, 2, 3});
}

TEST(StridedCopy, SameInnerDimCopiesRunsAndSizeOneDimsAreIgnored) {
  ExpectCopies<float>({6, 5, 4}, {1, 0, 2}, {0, 1, 2});
  ExpectCopies<float>({1, 8, 1, 9}, {0, 1, 2, 3}, {2, 3, 1, 0});
  ExpectCopies<float>({1, 1, 1}, {0, 1, 2}, {2, 1, 0});
}

TEST(StridedCopy, EveryElementSizeAndRandomPermutations) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const int rank = 1 + static_cast<int>(rng() % 6);
    std::vector<int64_t> dims(rank);
    for (auto& d : dims) d = 1 + static_cast<int64_t>(rng() % 7);
    std::vector<int> a(rank), b(rank);
    std::iota(a.begin(), a.end(), 0);
    std::iota(b.begin(), b.end(), 0);
    std::shuffle(a.begin(), a.end(), rng);
    std::shuffle(b.begin(), b.end(), rng);
    SCOPED_TRACE(trial);
    switch (trial % 4) {
      case 0: ExpectCopies<uint8_t>(dims, a, b); break;
      case 1: ExpectCopies<uint16_t>(dims, a, b); break;
      case 2: ExpectCopies<float>(dims, a, b); break;
      default: ExpectCopies<int64_t>(dims, a, b); break;
    }
  }
}

TEST(StridedCopy, RefusesLayoutsThatAreNotDense) {
  // A gap between rows, two dims on the same stride, a rank mismatch, an odd element size and
  // an empty dim: each is left to oneDNN's general reorder.
  EXPECT_FALSE(StridedCopy::Plan({4, 5}, {8, 1}, {5, 1}, 4).has_value());
  EXPECT_FALSE(StridedCopy::Plan({4, 5}, {1, 1}, {5, 1}, 4).has_value());
  EXPECT_FALSE(StridedCopy::Plan({4, 5}, {5, 1}, {1}, 4).has_value());
  EXPECT_FALSE(StridedCopy::Plan({4, 5}, {5, 1}, {1, 4}, 3).has_value());
  EXPECT_FALSE(StridedCopy::Plan({4, 0}, {1, 1}, {1, 1}, 4).has_value());
  EXPECT_TRUE(StridedCopy::Plan({4, 5}, {5, 1}, {1, 4}, 4).has_value());
}

}  // namespace
}  // namespace kiln::cpu
