// Choosing the activation layout by measurement (tactic selection, as TensorRT's builder
// does): which of oneDNN's layouts is fastest depends on the CPU and the batch size, not
// only on the model. Measured with bench/compare_ort.js on an AMD EPYC with AVX-512:
// MobileNet-v2 b8 35.9 ms with the primitives' choice (channels-last) vs 29.4 ms blocked,
// ResNet-50 b8 300 vs 287 ms, while at b1 the two are within noise.
#pragma once

#include <functional>
#include <memory>

#include "base/status.h"
#include "ir/graph.h"
#include "runtime/cpu/cpu_engine.h"
#include "runtime/engine.h"

namespace kiln::cpu {

using EngineBuilder =
    std::function<absl::StatusOr<std::unique_ptr<runtime::Engine>>(ActivationLayout layout)>;

struct TuneResult {
  ActivationLayout layout = ActivationLayout::kPrimitive;
  double tune_ms = 0.0;  // building the candidates and timing them
  std::unique_ptr<runtime::Engine> engine;
};

// Whether the layout can matter: the graph has a convolution (the primitives that take it).
bool HasLayoutChoice(const Graph& graph);

struct TunePolicy {
  int min_rounds = 2;        // timed runs per candidate, at least
  int max_rounds = 6;        // and at most
  // The whole tune (building the second candidate included) never runs past this: a
  // candidate still building or running at the deadline is stopped between kernels and loses.
  double budget_ms = 2000;
  // A large engine's budget grows with its first build (which ends with a warm-up run):
  // building the second candidate, warming both and two rounds cost about 2 builds and 6
  // runs, which 2 s does not hold at densenet121 b8 (a 460 ms build, 300 ms runs: the blocked
  // candidate, 30 % faster there, was stopped mid-run and lost every time). The budget is
  // this many first builds, within [budget_ms, max_budget_ms].
  double budget_per_build = 8.0;
  double max_budget_ms = 8000;
  double margin = 0.03;      // blocked must be this much faster to be chosen
  double abandon = 2.0;      // a candidate this much slower than the other after a round is dropped
};

// Graphs without a convolution have no layout to choose: kPrimitive, built once, untimed.
// Otherwise the primitive layout is built first (it is the answer whenever tuning cannot
// finish); the blocked candidate only when the first build suggests both fit the budget.
// The two then run alternately on zero inputs until min_rounds are done and the budget is
// spent (or max_rounds), and the lower best time wins. A candidate that fails to build or
// run, or is clearly slower after a round, loses; if both fail to build, the primitive's error.
absl::StatusOr<TuneResult> TuneLayout(const Graph& graph, const EngineBuilder& build,
                                      const TunePolicy& policy = {});

// One thread or the whole team. A small engine spends much of its time between kernels, and
// what the team costs there depends on the host: workers spinning on a vCPU that shares a
// core with the one running the serial kernels slow them down, and workers asleep take a
// futex wake-up (tens of microseconds on a VM) at every parallel kernel. Measured on this
// project's 2-vCPU VM: bert_tiny b1 0.17 ms on 2 threads, 0.054 ms on one.
struct ThreadPolicy {
  double small_ms = 2.0;  // engines slower than this on the team keep the team, untimed
  int runs = 15;          // timed runs per candidate (in alternating blocks of five)
  double margin = 0.05;   // one thread must be this much faster (median) to be chosen
};

struct ThreadResult {
  bool serial = false;     // the one-thread build was kept
  double tune_ms = 0.0;
  std::unique_ptr<runtime::Engine> engine;
};

using SerialBuilder = std::function<absl::StatusOr<std::unique_ptr<runtime::Engine>>()>;

// Times `team` (its median over a few runs on zero inputs); when that is under
// policy.small_ms, builds the one-thread candidate and times the two in alternating blocks,
// keeping the one-thread build if its median is lower by the margin. A candidate that fails to build or
// run loses.
ThreadResult TuneThreads(std::unique_ptr<runtime::Engine> team, const SerialBuilder& serial,
                         const ThreadPolicy& policy = {});

}  // namespace kiln::cpu
