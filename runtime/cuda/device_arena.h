// Internal to runtime/cuda: an engine's device memory as arena_layout.h lays it out: three
// allocations (the memory plan's arena, the io region, the weights, uploaded here) and one
// pinned staging buffer for the graph's inputs and outputs.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/cuda/arena_layout.h"
#include "runtime/cuda/device_memory.h"

namespace kiln::cuda {

struct DeviceArena {
  DeviceBuffer arena, io, weights;
  PinnedBuffer staging;
  std::unordered_map<std::string, void*> ptrs;  // value name -> device pointer
  // Per graph input / output, in order: device buffer, pinned staging, bytes.
  std::vector<void*> in_device, out_device, in_host, out_host;
  std::vector<size_t> in_bytes, out_bytes;
  int64_t weight_bytes = 0;
};

absl::StatusOr<DeviceArena> AllocateArena(const ArenaLayout& layout);

}  // namespace kiln::cuda
