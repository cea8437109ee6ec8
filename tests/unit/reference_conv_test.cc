// The reference Conv's two paths (direct, and im2col times the tiled product) give the bits
// of one plain serial sum: bias first, then every (input channel, tap) in order, padded taps
// skipped. Geometries cover both paths: pads, strides, dilations, groups, 1-D and 3-D,
// depthwise (direct), and a non-finite weight (direct: inf * padding would be NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "tests/unit/op_test_util.h"

namespace kiln {
namespace {

using optest::RunOp;

struct Case {
  std::vector<int64_t> x, w;  // [N, C, spatial...], [M, C/group, kernel...]
  int64_t group;
  std::vector<int64_t> strides, dilations, pads;  // pads: begins then ends
};

Tensor Random(const std::vector<int64_t>& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  Tensor t(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng) * (1 + rng() % 50);
  return t;
}

// Spatial dims padded to 3 with leading 1s (as the kernel does).
std::vector<int64_t> As3(std::vector<int64_t> v, int64_t fill) {
  while (v.size() < 3) v.insert(v.begin(), fill);
  return v;
}

// The serial sum, in double, rounded to float once.
Tensor Serial(const Tensor& x, const Tensor& w, const Tensor& b, const Case& c) {
  const size_t r = c.x.size() - 2;
  const auto in = As3({c.x.begin() + 2, c.x.end()}, 1), k = As3({c.w.begin() + 2, c.w.end()}, 1);
  const auto s = As3(c.strides, 1), d = As3(c.dilations, 1);
  const auto pb = As3({c.pads.begin(), c.pads.begin() + r}, 0);
  const auto pe = As3({c.pads.begin() + r, c.pads.end()}, 0);
  int64_t out[3];
  for (int i = 0; i < 3; ++i) out[i] = (in[i] + pb[i] + pe[i] - d[i] * (k[i] - 1) - 1) / s[i] + 1;
  const int64_t n_batch = c.x[0], cin = c.x[1], m_out = c.w[0], cg = cin / c.group, mg = m_out / c.group;
  std::vector<int64_t> shape = {n_batch, m_out};
  for (size_t i = 3 - r; i < 3; ++i) shape.push_back(out[i]);
  Tensor y(DType::kFloat32, shape);
  int64_t at = 0;
  for (int64_t n = 0; n < n_batch; ++n)
    for (int64_t m = 0; m < m_out; ++m)
      for (int64_t od = 0; od < out[0]; ++od)
        for (int64_t oh = 0; oh < out[1]; ++oh)
          for (int64_t ow = 0; ow < out[2]; ++ow) {
            double acc = b.GetDouble(m);
            for (int64_t ci = 0; ci < cg; ++ci)
              for (int64_t kd = 0; kd < k[0]; ++kd)
                for (int64_t kh = 0; kh < k[1]; ++kh)
                  for (int64_t kw = 0; kw < k[2]; ++kw) {
                    const int64_t id = od * s[0] + kd * d[0] - pb[0];
                    const int64_t ih = oh * s[1] + kh * d[1] - pb[1];
                    const int64_t iw = ow * s[2] + kw * d[2] - pb[2];
                    if (id < 0 || ih < 0 || iw < 0 || id >= in[0] || ih >= in[1] || iw >= in[2]) continue;
                    const int64_t c_at = m / mg * cg + ci;
                    const double xv = x.GetDouble(((n * cin + c_at) * in[0] + id) * in[1] * in[2] + ih * in[2] + iw);
                    const double wv = w.GetDouble((((m * cg + ci) * k[0] + kd) * k[1] + kh) * k[2] + kw);
                    const double prod = wv * xv;
                    acc = acc + prod;
                  }
            y.mutable_data<float>()[at++] = static_cast<float>(acc);
          }
  return y;
}

void ExpectSameBits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const float a = got.data<float>()[i], b = want.data<float>()[i];
    if (std::isnan(a) && std::isnan(b)) continue;
    ASSERT_EQ(std::memcmp(&a, &b, sizeof a), 0) << what << " element " << i << ": " << a << " vs " << b;
  }
}

Tensor RunConv(const Tensor& x, const Tensor& w, const Tensor& b, const Case& c) {
  optest::Attrs attrs = {{"group", Attribute::Int(c.group)},
                         {"strides", Attribute::Ints(c.strides)},
                         {"dilations", Attribute::Ints(c.dilations)},
                         {"pads", Attribute::Ints(c.pads)}};
  auto r = RunOp("Conv", {x, w, b}, attrs);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? (*r)[0] : Tensor();
}

const Case kCases[] = {
    {{2, 8, 9, 11}, {16, 8, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},   // product, padded
    {{1, 6, 13, 10}, {8, 3, 3, 2}, 2, {2, 1}, {2, 1}, {2, 0, 1, 3}},   // groups, dilation, odd pads
    {{1, 4, 7, 7}, {12, 4, 1, 1}, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}},    // 1x1
    {{2, 5, 17}, {7, 5, 4}, 1, {3}, {1}, {2, 1}},                       // 1-D
    {{1, 3, 5, 6, 4}, {4, 3, 2, 3, 2}, 1, {1, 2, 1}, {1, 1, 2}, {1, 0, 1, 0, 1, 1}},  // 3-D
    {{1, 8, 6, 6}, {8, 1, 3, 3}, 8, {1, 1}, {1, 1}, {1, 1, 1, 1}},     // depthwise: direct
    {{1, 2, 5, 5}, {2, 2, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}},     // too small: direct
};

TEST(ReferenceConv, BothPathsGiveTheSerialSumBitForBit) {
  uint32_t seed = 1;
  for (const Case& c : kCases) {
    const Tensor x = Random(c.x, seed++), w = Random(c.w, seed++), b = Random({c.w[0]}, seed++);
    ExpectSameBits(RunConv(x, w, b, c), Serial(x, w, b, c), "case " + std::to_string(seed));
  }
}

// An infinite weight next to padding: the serial sum skips the padded taps (no NaN from
// inf * 0 at the border), and so must the kernel.
TEST(ReferenceConv, AnInfiniteWeightNeverMeetsThePadding) {
  const Case c = kCases[0];
  const Tensor x = Random(c.x, 50), b = Random({c.w[0]}, 51);
  Tensor w = Random(c.w, 52);
  w.mutable_data<float>()[0] = std::numeric_limits<float>::infinity();  // tap (0, 0): reads padding at the top-left
  const Tensor got = RunConv(x, w, b, c), want = Serial(x, w, b, c);
  ExpectSameBits(got, want, "inf weight");
  EXPECT_FALSE(std::isnan(got.data<float>()[0]));  // output (0, 0, 0, 0) reads only padding through that tap
}

}  // namespace
}  // namespace kiln
