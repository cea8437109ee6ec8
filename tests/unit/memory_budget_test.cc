// The memory budget: accounts and their caps, tensor buffers charged inside a scope and given
// back when freed, and the reference interpreter refusing a node past the budget.
#include "base/memory_budget.h"

#include <gtest/gtest.h>

#include <thread>

#include "ir/builder.h"
#include "ir/tensor.h"
#include "ops/interpreter.h"

namespace kiln {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(MemoryAccount, ChargesUpToItsCapAndGivesBack) {
  auto root = std::make_shared<MemoryAccount>("root", 10 * kMiB, nullptr, "test.budget");
  EXPECT_TRUE(root->Charge(6 * kMiB).ok());
  absl::Status s = root->Charge(6 * kMiB);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("test.budget"), std::string::npos) << s;
  EXPECT_EQ(root->used(), 6 * kMiB);  // the refused charge left nothing behind
  root->Release(6 * kMiB);
  EXPECT_TRUE(root->Charge(10 * kMiB).ok());
  EXPECT_EQ(root->peak(), 10 * kMiB);
}

TEST(MemoryAccount, AChildIsBoundByItsOwnCapAndEveryCapAbove) {
  auto root = std::make_shared<MemoryAccount>("root", 10 * kMiB, nullptr);
  auto build = std::make_shared<MemoryAccount>("build", 4 * kMiB, root);
  auto request = std::make_shared<MemoryAccount>("request", 0, root);
  EXPECT_FALSE(build->Charge(5 * kMiB).ok());  // its own cap
  EXPECT_EQ(root->used(), 0);
  EXPECT_TRUE(build->Charge(4 * kMiB).ok());
  EXPECT_TRUE(request->Charge(6 * kMiB).ok());
  absl::Status s = request->Charge(1);  // the root's cap, though the request has none
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(request->used(), 6 * kMiB);
  EXPECT_EQ(root->used(), 10 * kMiB);
}

TEST(MemoryScope, TensorsAreChargedWhileTheyLiveWhereverTheyAreFreed) {
  auto account = std::make_shared<MemoryAccount>("t", 64 * kMiB, nullptr);
  Tensor kept;
  {
    MemoryScope scope(account);
    Tensor a(DType::kFloat32, {1024, 1024});  // 4 MiB
    kept = Tensor::Uninitialized(DType::kFloat32, {256, 1024});  // 1 MiB, outlives the scope
    EXPECT_EQ(account->used(), 5 * kMiB);
  }
  EXPECT_EQ(account->used(), 1 * kMiB);
  Tensor outside(DType::kFloat32, {1024, 1024});  // no scope: not charged
  EXPECT_EQ(account->used(), 1 * kMiB);
  std::thread([t = std::move(kept)]() mutable { t = Tensor(); }).join();
  EXPECT_EQ(account->used(), 0);
}

TEST(MemoryScope, ARefusedTensorThrowsAndCatchOutOfMemorySaysWhy) {
  auto account = std::make_shared<MemoryAccount>("the test", 8 * kMiB, nullptr, "test.cap");
  MemoryScope scope(account);
  auto made = CatchOutOfMemory([]() -> absl::StatusOr<Tensor> {
    return Tensor(DType::kFloat32, {4096, 1024});  // 16 MiB
  });
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(made.status().message().find("test.cap"), std::string::npos) << made.status();
  EXPECT_EQ(account->used(), 0);
  // Negative: within the cap the same call succeeds.
  auto small = CatchOutOfMemory([]() -> absl::StatusOr<Tensor> {
    return Tensor(DType::kFloat32, {256, 1024});
  });
  EXPECT_TRUE(small.ok());
}

TEST(MemoryScope, ScopesNestAndANullAccountChargesNothing) {
  auto outer = std::make_shared<MemoryAccount>("outer", 0, nullptr);
  auto inner = std::make_shared<MemoryAccount>("inner", 0, outer);
  MemoryScope a(outer);
  {
    MemoryScope b(inner);
    Tensor t(DType::kUInt8, {kMiB});
    EXPECT_EQ(inner->used(), kMiB);
    EXPECT_EQ(outer->used(), kMiB);
    {
      MemoryScope none(nullptr);
      Tensor u(DType::kUInt8, {kMiB});
      EXPECT_EQ(outer->used(), kMiB);
    }
    Tensor v(DType::kUInt8, {kMiB});
    EXPECT_EQ(inner->used(), 2 * kMiB);
  }
  EXPECT_EQ(inner->used(), 0);
  EXPECT_EQ(CurrentMemoryAccount()->get(), outer.get());
}

TEST(MemoryReservation, HoldsItsBytesUntilReset) {
  auto account = std::make_shared<MemoryAccount>("r", 10 * kMiB, nullptr);
  auto r = MemoryReservation::Make(account, 8 * kMiB);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(MemoryReservation::Make(account, 4 * kMiB).ok());
  MemoryReservation moved = std::move(*r);
  EXPECT_EQ(account->used(), 8 * kMiB);
  moved.Reset();
  EXPECT_EQ(account->used(), 0);
}

TEST(MemoryBudget, TheReferenceRefusesANodePastTheBudgetBeforeItAllocates) {
  // ConstantOfShape [20000, 20000] float: 1.6 GB of output, 3.2 GB widened: refused under a
  // 256 MiB account, with the node named; a small one runs.
  GraphBuilder b;
  Value* shape = b.Input("shape", DType::kInt64, {Dim(2)});
  b.Output(b.Op("ConstantOfShape", {shape}));
  std::unique_ptr<Graph> g = b.Build();
  auto account = std::make_shared<MemoryAccount>("a fold", 256 * kMiB, nullptr);
  MemoryScope scope(account);
  auto big = ref::Run(*g, {{"shape", Tensor::FromInt64({20000, 20000}, {2})}});
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(big.status().message().find("ConstantOfShape"), std::string::npos) << big.status();
  EXPECT_EQ(account->used(), 0);
  auto small = ref::Run(*g, {{"shape", Tensor::FromInt64({20, 20}, {2})}});
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->begin()->second.numel(), 400);
}

TEST(MemoryBudget, TheDefaultIsMostOfTheMachine) {
  const int64_t budget = DefaultMemoryBudget();
  EXPECT_GT(budget, 256 * kMiB);
  EXPECT_LT(budget, int64_t{1} << 50);
}

}  // namespace
}  // namespace kiln
