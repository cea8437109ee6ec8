// Buffer assignment: the graph-free core of the memory planner.
//
// Contract. Given buffer requests {size, first_step, last_step} (an inclusive lifetime over a
// schedule of steps), AssignBuffers places every buffer at an offset in one arena such that
// two buffers whose lifetimes share a step never share a byte. Sizes are rounded up to
// `alignment` before placement, so every offset is a multiple of it and every buffer may be
// read and written up to its aligned end (vector kernels run over the padding).
//
// Algorithm. Offline interval packing is NP-hard, so this is the classic greedy used by TFLite
// and ONNX Runtime (take buffers largest first; put each in the tightest gap left between the
// already-placed buffers it is live with, or on top of them), run under several orderings and
// two gap rules, keeping the smallest arena. Every run is exact about safety; the orderings
// only trade packing quality. The search stops early when an arena meets the lower bound
// (the largest aligned live set at one step), which no placement can beat.
//
// Deliberately left alone: which buffers exist and how long they live (memory_plan.h decides
// that from the graph), and fragmentation across several arenas (there is one).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace kiln::plan {

struct BufferRequest {
  int64_t size_bytes = 0;  // >= 0; zero-sized buffers get offset 0 and occupy nothing
  int64_t first_step = 0;  // >= 0
  int64_t last_step = 0;   // inclusive, >= first_step
};

struct AssignOptions {
  int64_t alignment = 64;  // >= 1; offsets and padded sizes are multiples of it
  // Try the alternative orderings and gap rules too (off: greedy by size, best fit only).
  bool search_orderings = true;
};

struct BufferAssignment {
  int64_t alignment = 64;
  std::vector<int64_t> offsets;   // one per request, in request order
  int64_t arena_bytes = 0;        // max over buffers of offset + aligned size
  int64_t naive_bytes = 0;        // sum of aligned sizes: every buffer on its own
  int64_t lower_bound_bytes = 0;  // largest sum of aligned sizes live at one step
  std::string strategy;           // the ordering and gap rule that won, for reports
};

// Rounds `bytes` up to a multiple of `alignment` (alignment >= 1).
int64_t AlignUp(int64_t bytes, int64_t alignment);

// The largest sum of aligned sizes live at any one step. Requests must be valid.
int64_t LiveLowerBound(const std::vector<BufferRequest>& requests, int64_t alignment);

// INVALID_ARGUMENT on a negative size or step, last_step < first_step, an alignment < 1, or
// sizes whose sum would overflow int64.
absl::StatusOr<BufferAssignment> AssignBuffers(const std::vector<BufferRequest>& requests,
                                               const AssignOptions& options = {});

// Checks an assignment against its requests: one offset per request, every offset aligned and
// non-negative, every aligned extent inside arena_bytes, no two lifetime-overlapping buffers
// sharing a byte of their aligned extents, and naive/lower-bound figures consistent
// (lower bound <= arena <= naive). INTERNAL naming the first offending buffers otherwise.
absl::Status ValidatePlan(const BufferAssignment& plan, const std::vector<BufferRequest>& requests);

}  // namespace kiln::plan
