// Internal to runtime/cpu: how much work a node is, and running small ones on one thread
// (waking a second OpenMP thread costs more than it saves below kSerialWork).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "ir/graph.h"
#include "runtime/cpu/build_context.h"
#include "runtime/cpu/cpu_engine.h"

namespace kiln::cpu {

// Multiply-adds (or elements) a node computes, roughly; nullopt when the output's shape is
// not static.
std::optional<int64_t> NodeWork(const Node& node);
// Below the work where splitting pays (NodeWork < 64K).
bool IsSmallWork(const Node& node);
// Multiply-adds (or elements) of the whole graph, as IsSmallWork counts them per node.
int64_t EstimatedWork(const Graph& graph);

// For options asking for runs narrower than the build (run_threads): the options that build
// at run_threads at once where the graph holds a node the engine always builds on a oneDNN
// primitive, whose team is fixed when it is created (a convolution, a product with bf16
// weights), so the engine could not follow a run's team; nullopt otherwise. A primitive this
// does not foresee (a pool, a binary op) is found after the wide build
// (CpuEngine::FollowsTeam), which is then built again narrow.
std::optional<CpuEngineOptions> NarrowAtOnce(const Graph& graph, const CpuEngineOptions& options);

// Runs a kernel with a one-thread OpenMP team (see IsSmallWork).
class SerialKernel : public CpuKernel {
 public:
  explicit SerialKernel(std::unique_ptr<CpuKernel> inner) : inner_(std::move(inner)) {}
  bool is_fallback() const override { return inner_->is_fallback(); }
  // Built and run on one thread whatever the team (a oneDNN primitive inside was created so).
  bool follows_team() const override { return true; }
  absl::Status Run(const ExecContext& ctx) override;

 private:
  std::unique_ptr<CpuKernel> inner_;
};

}  // namespace kiln::cpu
