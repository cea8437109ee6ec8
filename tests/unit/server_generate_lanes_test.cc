// Steps of one scheduler iteration side by side (server/generate/step_lanes.h, GeneratorSetup::
// lanes): every job runs once and a job's exception reaches the caller; with two lanes the
// toy decoder's steps overlap and every sequence still gets the rule's tokens, through
// preemption and a failing step; with one lane no two steps ever overlap.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "runtime/run_width.h"
#include "server/generate/step_lanes.h"
#include "tests/unit/generate_toy_loop.h"

namespace kiln::server::generate {
namespace {

using namespace testing;  // NOLINT: the toy decoder

TEST(StepLanes, RunsEveryJobOnceOnItsLanesAndOverlapsThem) {
  StepLanes lanes(3);
  EXPECT_EQ(lanes.lanes(), 3);
  for (int round = 0; round < 3; ++round) {  // the lanes serve Run after Run
    std::vector<std::atomic<int>> ran(20);
    std::atomic<int> now{0}, most{0};
    std::mutex mu;
    std::set<int> used;
    lanes.Run(ran.size(), [&](size_t job, int lane) {
      ++ran[job];
      const int at = ++now;
      for (int m = most.load(); at > m && !most.compare_exchange_weak(m, at);) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      --now;
      std::lock_guard<std::mutex> lk(mu);
      used.insert(lane);
    });
    for (const auto& r : ran) EXPECT_EQ(r.load(), 1);
    EXPECT_GE(most.load(), 2);
    EXPECT_LE(most.load(), 3);
    for (int lane : used) EXPECT_TRUE(lane >= 0 && lane < 3) << lane;
  }
  lanes.Run(0, [](size_t, int) { FAIL() << "no job to run"; });
}

TEST(StepLanes, OneLaneRunsTheJobsInOrderOnTheCallersThread) {
  StepLanes lanes(1);
  std::vector<size_t> order;
  const std::thread::id caller = std::this_thread::get_id();
  lanes.Run(5, [&](size_t job, int lane) {
    EXPECT_EQ(lane, 0);
    EXPECT_EQ(std::this_thread::get_id(), caller);
    order.push_back(job);
  });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3, 4}));
}

// A job alone leaves the other lanes idle, so its engine runs may take their cores
// (runtime/run_width.h); jobs side by side keep each engine's own (narrow) team, and one lane
// has no idle cores to lend.
TEST(StepLanes, AJobAloneRunsWidenedAndJobsSideBySideDoNot) {
  StepLanes two(2);
  std::vector<int> widths(3, -1);
  two.Run(1, [&](size_t job, int) { widths[job] = runtime::RunWidth(); });
  EXPECT_EQ(widths[0], runtime::ScopedRunWidth::kWidest);
  EXPECT_EQ(runtime::RunWidth(), 0);  // the scope ends with the Run
  two.Run(3, [&](size_t job, int) { widths[job] = runtime::RunWidth(); });
  for (int w : widths) EXPECT_EQ(w, 0);
  StepLanes one(1);
  one.Run(1, [&](size_t job, int) { widths[job] = runtime::RunWidth(); });
  EXPECT_EQ(widths[0], 0);
}

TEST(RunWidth, ScopesNestAndRestoreTheEnclosingWidth) {
  EXPECT_EQ(runtime::RunWidth(), 0);
  {
    runtime::ScopedRunWidth outer(runtime::ScopedRunWidth::kWidest);
    EXPECT_EQ(runtime::RunWidth(), runtime::ScopedRunWidth::kWidest);
    {
      runtime::ScopedRunWidth inner(0);  // below one is one thread
      EXPECT_EQ(runtime::RunWidth(), 1);
    }
    EXPECT_EQ(runtime::RunWidth(), runtime::ScopedRunWidth::kWidest);
    std::thread([] { EXPECT_EQ(runtime::RunWidth(), 0); }).join();  // per thread
  }
  EXPECT_EQ(runtime::RunWidth(), 0);
}

TEST(StepLanes, AJobsExceptionIsRethrownAfterTheOthersFinish) {
  StepLanes lanes(2);
  std::atomic<int> finished{0};
  EXPECT_THROW(lanes.Run(6,
                         [&](size_t job, int) {
                           std::this_thread::sleep_for(std::chrono::milliseconds(2));
                           if (job == 1) throw std::runtime_error("a step threw");
                           ++finished;
                         }),
               std::runtime_error);
  EXPECT_EQ(finished.load(), 5);
  std::atomic<int> again{0};  // the lanes still work
  lanes.Run(4, [&](size_t, int) { ++again; });
  EXPECT_EQ(again.load(), 4);
}

// A step that counts how many steps run at once (and waits a little, so that they can).
struct Overlap {
  std::atomic<int> now{0}, most{0};
  StepFn Wrap(StepFn step) {
    return [this, step](std::vector<Tensor> in, int64_t rows, std::vector<Tensor> out) {
      const int at = ++now;
      for (int m = most.load(); at > m && !most.compare_exchange_weak(m, at);) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      --now;
      return step(std::move(in), rows, std::move(out));
    };
  }
};

// Ten sequences of different lengths at once; the most steps that overlapped.
int TenSequences(ToyOptions o) {
  Overlap overlap;
  o.step = overlap.Wrap(o.step);
  o.step_appending = overlap.Wrap(o.step_appending);
  o.max_rows = 2;  // several decode groups per iteration
  auto g = ToyGenerator(o);
  std::vector<std::shared_ptr<GenerationStream>> streams;
  for (int64_t i = 0; i < 10; ++i) {
    auto s = g->Submit(Greedy(Prompt(1 + i * 5, i), 20 + i));
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) streams.push_back(*s);
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    Outcome out = Drain(*streams[i]);
    EXPECT_TRUE(out.end.status.ok()) << out.end.status;
    const auto n = static_cast<int64_t>(i);
    EXPECT_EQ(out.tokens, Expected(Prompt(1 + n * 5, n), 20 + n)) << "sequence " << i;
  }
  EXPECT_EQ(g->stats().pages_free, g->stats().pages_total);
  return overlap.most.load();
}

TEST(GeneratorLanes, StepsOverlapAndEverySequenceKeepsTheRulesTokens) {
  for (bool appending : {false, true}) {
    SCOPED_TRACE(appending);
    ToyOptions o;
    o.appending = appending;
    o.lanes = 2;
    EXPECT_EQ(TenSequences(o), 2);
    o.lanes = 1;  // negative: one lane never runs two steps at once
    EXPECT_EQ(TenSequences(o), 1);
  }
}

TEST(GeneratorLanes, AFullCachePreemptsAndRecomputesWithoutLosingTokens) {
  // Six sequences over 12 pages (as in server_generate_test.cc), their steps side by side.
  ToyOptions o;
  o.lanes = 2;
  o.max_rows = 2;
  auto g = RunSixOverTwelvePages(o);
  EXPECT_EQ(g->stats().pages_free, g->stats().pages_total);
}

TEST(GeneratorLanes, AFailingStepEndsOnlyItsOwnSequences) {
  ToyOptions o;
  o.lanes = 2;
  o.max_rows = 1;  // each sequence its own step
  const int64_t poison = Prompt(6, 4)[0];
  o.step = [poison](std::vector<Tensor> in, int64_t rows,
                    std::vector<Tensor> out) -> absl::StatusOr<std::vector<Tensor>> {
    if (in[0].GetInt(0) == poison && in[0].dim(1) > 1) return absl::InternalError("poisoned step");
    return ToyStep(std::move(in), rows, std::move(out));
  };
  auto g = ToyGenerator(o);
  auto bad = g->Submit(Greedy(Prompt(6, 4), 5));
  auto good = g->Submit(Greedy(Prompt(7, 5), 5));
  ASSERT_TRUE(bad.ok() && good.ok());
  Outcome b = Drain(**bad), ok = Drain(**good);
  EXPECT_EQ(b.end.status.code(), absl::StatusCode::kInternal) << b.end.status;
  ASSERT_TRUE(ok.end.status.ok()) << ok.end.status;
  EXPECT_EQ(ok.tokens, Expected(Prompt(7, 5), 5));
  EXPECT_EQ(g->stats().pages_free, g->stats().pages_total);
}

TEST(GeneratorLanes, ASetupWithNoLaneIsRefused) {
  ToyOptions o;
  o.lanes = 0;
  auto g = Generator::Create(ToySetup(o), std::make_shared<MemoryAccount>("test", 0, nullptr));
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
}

}  // namespace
}  // namespace kiln::server::generate
