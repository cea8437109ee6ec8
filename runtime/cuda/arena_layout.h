// Where every value of a CUDA engine lives, decided without a device (pure, unit-tested):
// the memory plan's arena (every planned value at its planned offset), the io region (graph
// inputs, and graph outputs that nothing else holds), the weights region (constants that
// device steps read, constant graph outputs, and constants that views alias). Values that
// the plan marks as external views live wherever their root does. device_arena.cc turns
// this into pointers.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "compiler/plan/memory_plan.h"
#include "ir/graph.h"

namespace kiln::cuda {

enum class Region { kArena, kIo, kWeights };

struct Placement {
  Region region = Region::kArena;
  int64_t offset = 0;  // bytes from the region's start
};

struct ArenaLayout {
  int64_t arena_bytes = 0, io_bytes = 0, weight_bytes = 0;
  std::unordered_map<std::string, Placement> at;  // value name -> where its bytes are
  std::vector<const Value*> weights;              // uploaded at build, in weights-region order
  // Per graph input / output (in order): its placement and size, for the staging copies.
  std::vector<Placement> inputs, outputs;
  std::vector<int64_t> input_bytes, output_bytes;
};

inline constexpr int64_t kDeviceAlign = 256;  // cudaMalloc's alignment, kept per sub-buffer

// `device_constants`: the constants a device step (not a host fallback) reads.
absl::StatusOr<ArenaLayout> LayOutArena(const Graph& graph, const plan::MemoryPlan& plan,
                                        const std::vector<const Value*>& device_constants);

}  // namespace kiln::cuda
