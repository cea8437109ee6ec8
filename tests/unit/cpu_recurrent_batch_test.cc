// The recurrent kernel's batched steps: without sequence_lens the sequences of a direction
// step together, up to four sharing each read of R (runtime/cpu/axpy_rows.h). The products
// keep each sum's order, so a batch computes what each sequence alone computes, bit for bit.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/cpu/axpy_rows.h"
#include "tests/unit/cpu_engine_util.h"

namespace kiln {
namespace {

using namespace cpu_test;  // NOLINT: the shared checks read as part of this file

std::vector<float> Uniform(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// 1..4 rows at once equal each row's own one-row call bit for bit, for widths with and
// without a partial column block; a row beyond `rows` is not touched; and the one-row call
// is the product (against a double-precision sum).
TEST(AxpyRowsMulti, EqualsTheOneRowProductBitForBit) {
  const int64_t k_count = 37, ld = 112;
  const std::vector<float> m = Uniform(k_count * ld, 1);
  for (int64_t n : {8, 32, 80, 112}) {
    for (int rows = 1; rows <= cpu::kMaxAxpyRows; ++rows) {
      std::vector<std::vector<float>> in, got, want;
      const float* ins[cpu::kMaxAxpyRows];
      float* outs[cpu::kMaxAxpyRows];
      for (int r = 0; r < cpu::kMaxAxpyRows; ++r) {
        in.push_back(Uniform(k_count, 10 + r));
        got.push_back(Uniform(n, 20 + r));  // accumulated into, as the gates are
        want.push_back(got.back());
      }
      for (int r = 0; r < cpu::kMaxAxpyRows; ++r) {
        ins[r] = in[r].data();
        outs[r] = got[r].data();
      }
      cpu::AxpyRowsMulti(ins, rows, k_count, m.data(), ld, outs, n);
      for (int r = 0; r < rows; ++r) {
        const float* one_in = in[r].data();
        float* one_out = want[r].data();
        cpu::AxpyRowsMulti(&one_in, 1, k_count, m.data(), ld, &one_out, n);
        const std::vector<float> start = Uniform(n, 20 + r);
        for (int64_t j = 0; j < n; ++j) {
          double sum = start[j];
          for (int64_t k = 0; k < k_count; ++k) sum += double(in[r][k]) * m[k * ld + j];
          ASSERT_NEAR(want[r][j], sum, 1e-5 * (1 + std::abs(sum))) << "row " << r << " col " << j;
        }
      }
      for (int r = 0; r < cpu::kMaxAxpyRows; ++r) {
        EXPECT_EQ(std::memcmp(got[r].data(), want[r].data(), n * sizeof(float)), 0)
            << "n " << n << ", " << rows << " rows, row " << r
            << (r >= rows ? " (not asked for: must be untouched)" : "");
      }
    }
  }
}

// Batches of 6 (a group of four and one of two) and 1 through every cell, against the
// reference; hidden 20 makes the gate rows 60 or 80 wide (a full column block and a tail).
TEST(CpuEngineRecurrentBatch, GroupsOfSequencesMatchTheReference) {
  for (int64_t B : {6, 1}) {
    SCOPED_TRACE("batch " + std::to_string(B));
    GraphBuilder b;
    const int64_t T = 7, I = 5, H = 20;
    Value* x = b.Input("x", DType::kFloat32, {T, B, I});
    Value* h0 = b.Input("h0", DType::kFloat32, {2, B, H});
    Value* c0 = b.Input("c0", DType::kFloat32, {2, B, H});
    int n = 0;
    auto w = [&](std::vector<int64_t> shape) {
      ++n;
      return b.Constant("w" + std::to_string(n), Random(shape, 300 + n, 0.4f));
    };
    using A = std::map<std::string, Attribute>;
    Value* none = nullptr;
    for (Value* o : b.OpN(
             "LSTM",
             {x, w({2, 4 * H, I}), w({2, 4 * H, H}), w({2, 8 * H}), none, h0, c0, w({2, 3 * H})}, 3,
             A{{"hidden_size", Attribute::Int(H)},
               {"direction", Attribute::String("bidirectional")},
               {"clip", Attribute::Float(3.f)}})) {
      b.Output(o);
    }
    for (int64_t lbr : {0, 1}) {
      for (Value* o : b.OpN("GRU", {x, w({1, 3 * H, I}), w({1, 3 * H, H}), w({1, 6 * H})}, 2,
                            A{{"hidden_size", Attribute::Int(H)},
                              {"linear_before_reset", Attribute::Int(lbr)}})) {
        b.Output(o);
      }
    }
    b.Output(b.OpN(
        "RNN", {x, w({1, H, I}), w({1, H, H})}, 2,
        A{{"hidden_size", Attribute::Int(H)}, {"direction", Attribute::String("reverse")}})[0]);
    Outcome o = ExpectMatchesReference(b.Build(), /*max_fallbacks=*/0);
    ASSERT_TRUE(o.engine);
    EXPECT_EQ(o.engine->info().fallback_ops, 0);
  }
}

}  // namespace
}  // namespace kiln
