// Layout tuning (runtime/cpu/tune.h): the faster candidate wins by its best run, only by a
// margin, never a broken one; graphs without a convolution are not tuned at all.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "ir/builder.h"
#include "runtime/cpu/tune.h"

namespace kiln::cpu {
namespace {

using std::chrono::microseconds;

// An engine whose Run sleeps a fixed time (or fails), standing in for a built CPU engine.
class FakeEngine : public runtime::Engine {
 public:
  FakeEngine(microseconds run_time, bool fails) : run_time_(run_time), fails_(fails) {
    inputs_.push_back({"x", DType::kFloat32, {1, 4}});
  }
  const runtime::EngineInfo& info() const override { return info_; }
  const std::vector<runtime::TensorSpec>& inputs() const override { return inputs_; }
  const std::vector<runtime::TensorSpec>& outputs() const override { return outputs_; }
  absl::Status Run(const std::vector<Tensor>& in, std::vector<Tensor>&) override {
    ++runs;
    EXPECT_EQ(in.size(), 1u);
    std::this_thread::sleep_for(run_time_);
    return fails_ ? absl::InternalError("refused") : absl::OkStatus();
  }
  int runs = 0;

 private:
  microseconds run_time_;
  bool fails_;
  runtime::EngineInfo info_;
  std::vector<runtime::TensorSpec> inputs_, outputs_;
};

struct Candidate {
  microseconds run_time{1000};
  bool build_fails = false;
  bool run_fails = false;
  microseconds build_time{0};
};

// A builder over two fake candidates; counts builds per layout.
struct FakeBuilder {
  Candidate primitive, blocked;
  int builds = 0;
  EngineBuilder Fn() {
    return [this](ActivationLayout l) -> absl::StatusOr<std::unique_ptr<runtime::Engine>> {
      ++builds;
      const Candidate& c = l == ActivationLayout::kBlocked ? blocked : primitive;
      std::this_thread::sleep_for(c.build_time);
      if (c.build_fails) return absl::UnimplementedError("no primitive");
      return std::unique_ptr<runtime::Engine>(new FakeEngine(c.run_time, c.run_fails));
    };
  }
};

std::unique_ptr<Graph> ConvGraph() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 4, 8, 8});
  b.Output(b.Op("Conv", {x, b.Constant("w", Tensor(DType::kFloat32, {4, 4, 1, 1}))}));
  return b.Build();
}

std::unique_ptr<Graph> MatMulGraph() {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 4});
  b.Output(b.Op("MatMul", {x, b.Constant("w", Tensor(DType::kFloat32, {4, 4}))}));
  return b.Build();
}

TEST(TuneLayout, TheClearlyFasterCandidateWins) {
  auto g = ConvGraph();
  // Far apart (10x), so a loaded machine's sleep jitter cannot reorder them.
  FakeBuilder slow_blocked{{microseconds(2000)}, {microseconds(20000)}};
  auto r = TuneLayout(*g, slow_blocked.Fn());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->layout, ActivationLayout::kPrimitive);
  EXPECT_GT(r->tune_ms, 0);
  FakeBuilder fast_blocked{{microseconds(20000)}, {microseconds(2000)}};
  r = TuneLayout(*g, fast_blocked.Fn());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->layout, ActivationLayout::kBlocked);
  // The winner is one of the timed engines, handed over; the loser, 10x slower, was dropped
  // after its first round instead of being timed min_rounds times (each candidate also had
  // one untimed warm-up run).
  EXPECT_EQ(static_cast<FakeEngine*>(r->engine.get())->runs, 1 + 1);
}

TEST(TuneLayout, ACandidatePastTheBudgetIsStoppedAndLoses) {
  // The stand-in for a pathological layout: every run takes longer than the whole budget.
  auto g = ConvGraph();
  FakeBuilder slow_blocked{{microseconds(200)}, {microseconds(400000)}};
  TunePolicy p;
  p.budget_ms = 100;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = TuneLayout(*g, slow_blocked.Fn(), p);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->layout, ActivationLayout::kPrimitive);
  // The fake cannot be stopped mid-run (a real engine is, between kernels): one run of it
  // bounds the overrun.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.6);
}

TEST(TuneLayout, NoSecondCandidateWhenTheFirstBuildFillsTheBudget) {
  auto g = ConvGraph();
  FakeBuilder b{{microseconds(100)}, {microseconds(100)}};
  TunePolicy p;
  p.budget_ms = 0;  // any first build fills it
  p.max_budget_ms = 0;
  auto r = TuneLayout(*g, b.Fn(), p);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(b.builds, 1);
  EXPECT_EQ(r->layout, ActivationLayout::kPrimitive);
}

// A large engine: builds of 60 ms and runs of 40 ms do not fit a 200 ms floor (2 builds and 6
// runs are 360 ms), but the budget grows to 8 builds (480 ms) and the faster candidate wins;
// with the growth capped at the floor the second candidate never runs.
TEST(TuneLayout, TheBudgetGrowsWithTheFirstBuild) {
  auto g = ConvGraph();
  FakeBuilder b{{microseconds(80000), false, false, microseconds(60000)},
                {microseconds(40000), false, false, microseconds(60000)}};
  TunePolicy p;
  p.budget_ms = 200;
  p.max_budget_ms = 2000;
  auto r = TuneLayout(*g, b.Fn(), p);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->layout, ActivationLayout::kBlocked);
  FakeBuilder capped = b;
  capped.builds = 0;
  p.max_budget_ms = 0;  // the floor alone
  r = TuneLayout(*g, capped.Fn(), p);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->layout, ActivationLayout::kPrimitive);
}

TEST(TuneLayout, ATieKeepsThePrimitivesChoice) {
  auto g = ConvGraph();
  // Sleeps of 20 ms and a 20% margin: well above what a loaded VM's sleep jitter does to
  // the best of several rounds (a 2 ms sleep sometimes oversleeps by more than 3% in every
  // round).
  FakeBuilder tie{{microseconds(20000)}, {microseconds(20000)}};
  TunePolicy p;
  p.margin = 0.2;
  auto r = TuneLayout(*g, tie.Fn(), p);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->layout, ActivationLayout::kPrimitive);  // blocked is not faster by the margin
}

TEST(TuneLayout, NoConvolutionMeansNoTuning) {
  auto g = MatMulGraph();
  FakeBuilder b{{microseconds(3000)}, {microseconds(10)}};
  auto r = TuneLayout(*g, b.Fn());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->layout, ActivationLayout::kPrimitive);
  EXPECT_EQ(b.builds, 1);
  EXPECT_EQ(r->tune_ms, 0);
  EXPECT_EQ(static_cast<FakeEngine*>(r->engine.get())->runs, 0);
}

TEST(TuneLayout, ABrokenCandidateNeverWins) {
  auto g = ConvGraph();
  FakeBuilder blocked_fails_to_run{{microseconds(3000)}, {microseconds(10), false, true}};
  auto r = TuneLayout(*g, blocked_fails_to_run.Fn());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->layout, ActivationLayout::kPrimitive);
  FakeBuilder primitive_fails_to_build{{microseconds(10), true}, {microseconds(3000)}};
  r = TuneLayout(*g, primitive_fails_to_build.Fn());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->layout, ActivationLayout::kBlocked);
  FakeBuilder both_fail{{microseconds(10), true}, {microseconds(10), true}};
  r = TuneLayout(*g, both_fail.Fn());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
}

TEST(TuneLayout, StopsAtTheBudgetAfterTheMinimumRounds) {
  auto g = ConvGraph();
  // Runs of 50 ms: the two warm-up runs leave the budget ~50 ms, the first round spends it.
  FakeBuilder slow{{microseconds(50000)}, {microseconds(50000)}};
  TunePolicy p;
  p.budget_ms = 150;
  auto r = TuneLayout(*g, slow.Fn(), p);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(static_cast<FakeEngine*>(r->engine.get())->runs, 1 + p.min_rounds);  // + warm-up
}

TEST(ActivationLayoutNames, RoundTripAndRejectUnknown) {
  for (auto l : {ActivationLayout::kPrimitive, ActivationLayout::kBlocked, ActivationLayout::kTune}) {
    EXPECT_EQ(ParseActivationLayout(ActivationLayoutName(l)), l);
  }
  EXPECT_FALSE(ParseActivationLayout("nchw").has_value());
}

// TuneThreads: a serial builder over a fake candidate, counting builds.
struct SerialFake {
  Candidate one;
  int builds = 0;
  SerialBuilder Fn() {
    return [this]() -> absl::StatusOr<std::unique_ptr<runtime::Engine>> {
      ++builds;
      if (one.build_fails) return absl::UnimplementedError("no build");
      return std::unique_ptr<runtime::Engine>(new FakeEngine(one.run_time, one.run_fails));
    };
  }
};

TEST(TuneThreads, AFasterOneThreadBuildOfASmallEngineIsKept) {
  // Times far apart and a small-engine bound far above them, so a loaded machine's sleep
  // jitter cannot turn the answer.
  SerialFake fake{{microseconds(1000)}};
  auto* team = new FakeEngine(microseconds(10000), false);
  ThreadPolicy p;
  p.small_ms = 50;
  ThreadResult r = TuneThreads(std::unique_ptr<runtime::Engine>(team), fake.Fn(), p);
  EXPECT_TRUE(r.serial);
  EXPECT_EQ(fake.builds, 1);
  EXPECT_NE(r.engine.get(), team);
  EXPECT_GT(r.tune_ms, 0);
}

TEST(TuneThreads, TheTeamStaysWhenNotClearlySlower) {
  SerialFake fake{{microseconds(10000)}};
  auto* team = new FakeEngine(microseconds(10000), false);
  ThreadPolicy p;
  p.small_ms = 50;
  p.margin = 0.2;  // well above sleep jitter on a loaded VM
  ThreadResult r = TuneThreads(std::unique_ptr<runtime::Engine>(team), fake.Fn(), p);
  EXPECT_FALSE(r.serial);  // a tie keeps the team (the margin)
  EXPECT_EQ(r.engine.get(), team);
}

TEST(TuneThreads, LargeEnginesAreNotTried) {
  SerialFake fake{{microseconds(100)}};
  auto* team = new FakeEngine(microseconds(3000), false);  // above small_ms (2 ms)
  ThreadResult r = TuneThreads(std::unique_ptr<runtime::Engine>(team), fake.Fn());
  EXPECT_FALSE(r.serial);
  EXPECT_EQ(fake.builds, 0);
  EXPECT_EQ(r.engine.get(), team);
  EXPECT_EQ(r.tune_ms, 0);
}

TEST(TuneThreads, ABrokenOneThreadBuildNeverWins) {
  for (Candidate c : {Candidate{microseconds(10), true, false}, Candidate{microseconds(10), false, true}}) {
    SerialFake fake{c};
    auto* team = new FakeEngine(microseconds(1000), false);
    ThreadResult r = TuneThreads(std::unique_ptr<runtime::Engine>(team), fake.Fn());
    EXPECT_FALSE(r.serial);
    EXPECT_EQ(r.engine.get(), team);
  }
}

}  // namespace
}  // namespace kiln::cpu
