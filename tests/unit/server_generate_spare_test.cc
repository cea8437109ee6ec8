// A generation step's memory across shape changes (server/generate/spare_memory.h): kept
// buffers are reused zeroed and charged once; a buffer someone else still holds is never
// reused; an appending step built on reused memory holds exactly its rows' caches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "base/huge_pages.h"
#include "base/memory_budget.h"
#include "server/generate/decoder_contract.h"
#include "server/generate/kv_cache.h"
#include "server/generate/spare_memory.h"
#include "server/generate/step.h"
#include "tests/unit/generate_toy.h"

namespace kiln::server::generate {
namespace {

using namespace testing;  // NOLINT: the toy decoder

Tensor Filled(std::vector<int64_t> shape, float v) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = v;
  return t;
}

// A vector that holds the tensors alone (an initializer list would keep copies alive).
template <typename... T>
std::vector<Tensor> Own(T&&... t) {
  std::vector<Tensor> v;
  (v.push_back(std::forward<T>(t)), ...);
  return v;
}

bool AllZero(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

TEST(SpareMemory, ReusesTheSmallestKeptBufferThatHoldsTheTensorZeroed) {
  Tensor big = Filled({4, 256}, 7.0f), small = Filled({2, 256}, 7.0f);
  const void* big_at = big.raw();
  const void* small_at = small.raw();
  SpareMemory spare;
  // `big` twice, as one zero tensor stands for several past inputs: kept once.
  Tensor also_big = big;
  spare.Keep(Own(std::move(big), std::move(small), std::move(also_big), Tensor()));
  EXPECT_EQ(spare.blocks(), 2u);
  Tensor a = spare.Zeros(DType::kFloat32, {2, 200});  // 1600 bytes: both hold it
  EXPECT_EQ(a.raw(), small_at);
  EXPECT_TRUE(AllZero(a));
  EXPECT_EQ(a.owner().use_count(), 1);  // nothing else holds it: a later step may write over it
  Tensor b = spare.Zeros(DType::kFloat32, {8, 256});  // larger than any: fresh
  EXPECT_NE(b.raw(), big_at);
  EXPECT_EQ(spare.blocks(), 1u);
  Tensor c = spare.Zeros(DType::kInt64, {3, 100});  // another dtype on the same bytes
  EXPECT_EQ(c.raw(), big_at);
  EXPECT_TRUE(AllZero(c));
  EXPECT_EQ(spare.blocks(), 0u);
}

TEST(SpareMemory, TrimKeepsTheLargestBuffersAndABufferKeepsItsWholeSize) {
  constexpr int64_t kMiB = int64_t{1} << 20, kFloatsPerMiB = kMiB / 4;
  SpareMemory spare;
  spare.Keep(Own(Filled({4 * kFloatsPerMiB}, 1.0f), Filled({kFloatsPerMiB}, 1.0f),
                 Filled({5 * kFloatsPerMiB / 2}, 1.0f)));
  EXPECT_EQ(spare.bytes(), 7 * kMiB + kMiB / 2);
  spare.Trim(5 * kMiB + kMiB / 4);  // 4 MiB, then what still fits: 1 MiB, not 2.5 MiB
  EXPECT_EQ(spare.bytes(), 5 * kMiB);
  // Negative: half a MiB takes the 1 MiB buffer, not the 4 MiB one (over twice its size).
  Tensor half = spare.Zeros(DType::kFloat32, {kFloatsPerMiB / 2});
  EXPECT_EQ(spare.bytes(), 4 * kMiB);
  // 2.2 MiB on the 4 MiB buffer, kept again: the buffer still holds 4 MiB.
  Tensor part = spare.Zeros(DType::kFloat32, {kFloatsPerMiB * 22 / 10});
  EXPECT_EQ(spare.blocks(), 0u);
  spare.Keep(Own(std::move(part)));
  EXPECT_EQ(spare.bytes(), 4 * kMiB);
  Tensor again = spare.Zeros(DType::kFloat32, {kFloatsPerMiB * 39 / 10});
  EXPECT_TRUE(AllZero(again));
  EXPECT_EQ(spare.blocks(), 0u) << "the 4 MiB buffer came back as 2.2 MiB";
  spare.Keep(Own(std::move(again), std::move(half)));
  spare.Clear();
  EXPECT_EQ(spare.bytes(), 0);
  EXPECT_EQ(spare.blocks(), 0u);
}

// The negative case: a buffer that another tensor (an engine's output still read, a view)
// holds is dropped, not handed out again.
TEST(SpareMemory, NeverReusesABufferSomeoneElseHolds) {
  Tensor held = Filled({64}, 3.0f);
  Tensor reader = held;
  Tensor whole = Filled({64}, 5.0f);
  Tensor part = Tensor::View(DType::kFloat32, {32}, whole.owner(),
                             whole.mutable_data<float>() + 32);  // a view into part of it
  SpareMemory spare;
  spare.Keep(Own(std::move(held), part));
  EXPECT_EQ(spare.blocks(), 0u);
  Tensor fresh = spare.Zeros(DType::kFloat32, {64});
  EXPECT_NE(fresh.raw(), reader.raw());
  for (int i = 0; i < 64; ++i) ASSERT_EQ(reader.data<float>()[i], 3.0f);
  spare.Keep(Own(std::move(fresh)));
  EXPECT_EQ(spare.blocks(), 1u);
  spare.Clear();
  EXPECT_EQ(spare.blocks(), 0u);
}

TEST(SpareMemory, AFreshMultiMiBBufferTakesWholeHugePagesChargedToTheAccountInScope) {
  auto account = std::make_shared<MemoryAccount>("step", int64_t{3} << 20, nullptr);
  SpareMemory spare;
  const int64_t floats = (int64_t{1} << 18) + 1;  // 1 MiB and 4 bytes
  {
    MemoryScope scope(account);
    Tensor t = spare.Zeros(DType::kFloat32, {floats});
    EXPECT_EQ(account->used(), static_cast<int64_t>(HugePageRound(t.nbytes())));
    EXPECT_EQ(account->used(), int64_t{2} << 20);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % kHugePageBytes, 0u);
    EXPECT_TRUE(AllZero(t));
    // A second one would pass the 3 MiB cap: refused as any tensor is.
    EXPECT_THROW(spare.Zeros(DType::kFloat32, {floats}), MemoryBudgetError);
    for (int64_t i = 0; i < floats; ++i) t.mutable_data<float>()[i] = 7.0f;
    spare.Keep(Own(std::move(t)));
    EXPECT_EQ(account->used(), int64_t{2} << 20);  // kept memory stays charged
    Tensor again = spare.Zeros(DType::kFloat32, {floats - 100});
    EXPECT_EQ(account->used(), int64_t{2} << 20);  // reused, not charged twice
    EXPECT_TRUE(AllZero(again)) << "a reused block is zeroed (a fresh one is the kernel's zeros)";
  }
  EXPECT_EQ(account->used(), 0);
  EXPECT_EQ(HugePageRound(1000), 1000u);  // small buffers are not rounded
}

// An appending group's presents, made again on the memory of a larger earlier shape that
// holds stale values (NaN), hold each row's cache and zeros everywhere else.
TEST(SpareMemory, AnAppendingStepOnReusedMemoryHoldsItsRowsAndZeros) {
  const ModelSignature sig = ToySignature();
  auto contract = FindDecoderContract(sig);
  ASSERT_TRUE(contract.ok()) << contract.status();
  auto cache =
      KvCache::Create(*contract, 4, 8 * 4 * 8, std::make_shared<MemoryAccount>("t", 0, nullptr));
  ASSERT_TRUE(cache.ok());
  PageTable a, b;
  ASSERT_TRUE((*cache)->Grow(a, 4) && (*cache)->Grow(b, 4));
  Tensor values = Filled({1, 1, 4, 2}, 0.0f);
  for (int i = 0; i < 8; ++i) values.mutable_data<float>()[i] = static_cast<float>(i + 1);
  (*cache)->Scatter(0, values, 0, 0, 3, a, 0);  // a: 3 positions
  (*cache)->Scatter(0, values, 0, 0, 2, b, 0);  // b: 2 positions
  std::vector<int64_t> ta{1, 2, 3, 4}, tb{5, 6, 7};
  std::vector<Tensor> in, out;
  HeldRows held;
  // The group at 4 rows and a past of 8, its presents then holding stale NaNs.
  ASSERT_TRUE(BuildAppendingStep(*contract, sig, **cache, {{&ta, 3, &a}, {&tb, 2, &b}}, 4, 1, 1, 8,
                                 in, out, held)
                  .ok());
  std::set<const void*> old_at;
  for (std::vector<Tensor>* v : {&in, &out}) {
    for (Tensor& t : *v) {
      old_at.insert(t.raw());
      std::memset(t.raw_mutable(), 0xff, t.nbytes());  // NaN as float: stale values
    }
  }
  SpareMemory spare;
  spare.Keep(std::move(in));
  spare.Keep(std::move(out));
  in.clear();
  out.clear();
  held = {};
  // Its next shape (3 rows, the last a padding row, at a past of 4) is smaller: made on the
  // kept memory.
  ASSERT_TRUE(BuildAppendingStep(*contract, sig, **cache, {{&ta, 3, &a}, {&tb, 2, &b}}, 3, 1, 1, 4,
                                 in, out, held, &spare)
                  .ok());
  const Tensor& present = out[contract->cache[0].output];
  ASSERT_EQ(present.shape(), (std::vector<int64_t>{3, 1, 5, 2}));
  EXPECT_TRUE(AllZero(in[contract->cache[0].input]));  // the past input, never read, finite
  EXPECT_EQ(old_at.count(present.raw()), 1u);          // on the kept memory
  const Tensor& logits = out[contract->logits];
  EXPECT_EQ(old_at.count(logits.raw()), 1u);
  EXPECT_TRUE(AllZero(logits));
  const float* p = present.data<float>();
  for (int64_t row = 0; row < 3; ++row) {
    const int64_t cached = row == 0 ? 3 : row == 1 ? 2 : 0;  // the padding row: zeros
    for (int64_t pos = 0; pos < 5; ++pos) {
      for (int64_t k = 0; k < 2; ++k) {
        const float want = pos < cached ? static_cast<float>(pos * 2 + k + 1) : 0.0f;
        EXPECT_EQ(p[(row * 5 + pos) * 2 + k], want) << row << " " << pos << " " << k;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::server::generate
