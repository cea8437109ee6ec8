#include "runtime/cpu/tune.h"

#include <algorithm>
#include <chrono>
#include <limits>

namespace kiln::cpu {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

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

}  // namespace

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
  auto blocked = build(ActivationLayout::kBlocked);
  if (!blocked.ok() || !primitive.ok()) {
    if (!primitive.ok() && !blocked.ok()) return primitive.status();
    r.layout = primitive.ok() ? ActivationLayout::kPrimitive : ActivationLayout::kBlocked;
    r.engine = std::move(primitive.ok() ? *primitive : *blocked);
    r.tune_ms = MsSince(t0);
    return r;
  }
  const std::vector<Tensor> in = ZeroInputs(**primitive);
  std::vector<Tensor> out_a, out_b;
  double best_a = std::numeric_limits<double>::infinity(), best_b = best_a;
  for (int round = 0; round < policy.max_rounds; ++round) {
    if (round >= policy.min_rounds && MsSince(t0) > policy.budget_ms) break;
    best_a = std::min(best_a, TimeRun(**primitive, in, out_a));
    best_b = std::min(best_b, TimeRun(**blocked, in, out_b));
  }
  const bool pick_blocked = best_b < best_a * (1.0 - policy.margin);
  r.layout = pick_blocked ? ActivationLayout::kBlocked : ActivationLayout::kPrimitive;
  r.engine = std::move(pick_blocked ? *blocked : *primitive);
  r.tune_ms = MsSince(t0);
  return r;
}

}  // namespace kiln::cpu
