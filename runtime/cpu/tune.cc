#include "runtime/cpu/tune.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "base/elapsed.h"
#include "base/stop.h"

namespace kiln::cpu {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<Tensor> ZeroInputs(const runtime::Engine& e) {
  std::vector<Tensor> in;
  for (const auto& spec : e.inputs()) in.emplace_back(spec.dtype, spec.shape);
  return in;
}

// One timed run; +inf when the engine refuses (a fallback op may reject all-zero inputs).
double TimeRun(runtime::Engine& e, const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const Clock::time_point t0 = Clock::now();
  if (!e.Run(in, out).ok()) return std::numeric_limits<double>::infinity();
  return MsSince(t0);
}

double Median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Median of `runs` timed runs of each engine, in blocks of five after an untimed run, the
// blocks alternating. Not run by run: a one-thread run leaves the team's workers idle long
// enough to fall asleep, which would charge the team a wake-up that back-to-back serving
// does not pay.
std::pair<double, double> BlockMedians(runtime::Engine& a, runtime::Engine& b,
                                       const std::vector<Tensor>& in, int runs) {
  constexpr int kBlock = 5;
  std::vector<Tensor> out;
  std::vector<double> ta, tb;
  while (static_cast<int>(ta.size()) < runs) {
    for (auto [e, t] : {std::pair{&a, &ta}, std::pair{&b, &tb}}) {
      TimeRun(*e, in, out);
      for (int i = 0; i < kBlock; ++i) t->push_back(TimeRun(*e, in, out));
    }
  }
  return {Median(ta), Median(tb)};
}

}  // namespace

ThreadResult TuneThreads(std::unique_ptr<runtime::Engine> team, const SerialBuilder& serial,
                         const ThreadPolicy& policy) {
  const Clock::time_point t0 = Clock::now();
  ThreadResult r;
  const std::vector<Tensor> in = ZeroInputs(*team);
  std::vector<Tensor> out;
  // An untimed first run: the engine's first touches of its arena and packed weights are
  // not what serving pays (callers may build without warming, see CpuEngineOptions).
  team->Run(in, out).IgnoreError();
  // Five probe runs, stopping at the first that is not small (large engines cost one run).
  std::vector<double> probe;
  for (int i = 0; i < 5; ++i) {
    probe.push_back(TimeRun(*team, in, out));
    if (probe.back() >= policy.small_ms) break;
  }
  if (probe.size() < 5 || Median(probe) >= policy.small_ms) {
    r.engine = std::move(team);
    return r;
  }
  auto one = serial();
  if (one.ok()) {
    auto [team_ms, one_ms] = BlockMedians(*team, **one, in, std::max(1, policy.runs));
    r.serial = one_ms < team_ms * (1.0 - policy.margin);
  }
  r.engine = std::move(r.serial ? *one : team);
  r.tune_ms = MsSince(t0);
  return r;
}

bool HasLayoutChoice(const Graph& graph) {
  for (const auto& n : graph.nodes()) {
    if (n->op_type == "Conv" || n->op_type == "FusedConv") return true;
  }
  return false;
}

absl::StatusOr<TuneResult> TuneLayout(const Graph& graph, const EngineBuilder& build,
                                      const TunePolicy& policy) {
  TuneResult r;
  if (!HasLayoutChoice(graph)) {
    ASSIGN_OR_RETURN(r.engine, build(ActivationLayout::kPrimitive));
    return r;
  }
  const Clock::time_point t0 = Clock::now();
  auto primitive = build(ActivationLayout::kPrimitive);
  if (!primitive.ok()) {  // the other layout may still build (and then it is the answer)
    auto blocked = build(ActivationLayout::kBlocked);
    if (!blocked.ok()) return primitive.status();
    r.layout = ActivationLayout::kBlocked;
    r.engine = std::move(*blocked);
    r.tune_ms = MsSince(t0);
    return r;
  }
  r.engine = std::move(*primitive);
  // Building the second candidate costs about what the first did, and then each needs runs.
  const double first_ms = MsSince(t0);
  const double budget_ms = std::clamp(first_ms * policy.budget_per_build, policy.budget_ms,
                                      std::max(policy.budget_ms, policy.max_budget_ms));
  if (first_ms * 2.5 > budget_ms) {
    r.tune_ms = MsSince(t0);
    return r;
  }
  const auto deadline = t0 + std::chrono::microseconds(static_cast<int64_t>(budget_ms * 1e3));
  StopScope stop({deadline, nullptr, "layout tuning"});
  auto blocked = build(ActivationLayout::kBlocked);
  if (!blocked.ok() || !CheckStop().ok()) {
    r.tune_ms = MsSince(t0);
    return r;
  }
  const std::vector<Tensor> in = ZeroInputs(*r.engine);
  std::vector<Tensor> out_a, out_b;
  // Untimed first runs, so that round 0 compares warm engines (the abandon rule acts on it).
  r.engine->Run(in, out_a).IgnoreError();
  (*blocked)->Run(in, out_b).IgnoreError();
  if (!CheckStop().ok()) {  // a pathological candidate spent the budget warming up
    r.tune_ms = MsSince(t0);
    return r;
  }
  double best_a = std::numeric_limits<double>::infinity(), best_b = best_a;
  for (int round = 0; round < policy.max_rounds; ++round) {
    if (round >= policy.min_rounds && MsSince(t0) > budget_ms) break;
    best_a = std::min(best_a, TimeRun(*r.engine, in, out_a));
    best_b = std::min(best_b, TimeRun(**blocked, in, out_b));
    if (best_b > best_a * policy.abandon || best_a > best_b * policy.abandon) break;
  }
  if (best_b < best_a * (1.0 - policy.margin)) {
    r.layout = ActivationLayout::kBlocked;
    r.engine = std::move(*blocked);
  }
  r.tune_ms = MsSince(t0);
  return r;
}

}  // namespace kiln::cpu
