// Internal to runtime/cuda: where every value of an engine lives on the device. The memory
// plan's arena is one allocation (every planned value at its planned offset, in-place and
// view aliases included); graph inputs and outputs get buffers of their own (filled from and
// drained to pinned staging every run); constants that device steps read are uploaded once
// into one weights allocation; views of inputs, outputs and constants point at their root.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/plan/memory_plan.h"
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

// `device_constants`: the constants a device step (not a host fallback) reads.
absl::StatusOr<DeviceArena> AllocateArena(const Graph& graph, const plan::MemoryPlan& plan,
                                          const std::vector<const Value*>& device_constants);

}  // namespace kiln::cuda
