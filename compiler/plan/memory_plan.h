// The memory plan: where every intermediate value of a specialized graph lives in one arena.
//
// Contract. PlanMemory walks graph.nodes() in order (the schedule: step i is node i) and
// plans every node output that is neither a graph output nor a constant. Graph inputs,
// graph outputs and constants are not planned: the engine binds their buffers directly.
// Planned values need a static shape and a dtype with a dense byte size (INVALID_ARGUMENT
// naming the value otherwise). Buffers are grouped before placement:
//   - Views. The first output of Reshape, Flatten, Squeeze, Unsqueeze, Identity (ai.onnx),
//     or of any node with the int attribute kiln_view=1, shares input 0's buffer (same
//     offset); the buffer then lives until the view's last use. A view of a graph input,
//     constant or graph output is not planned: it is marked `external`, an alias of that value.
//   - In place (PlanOptions::in_place). An element-wise op (IsInPlaceElementwise) writes its
//     output over input k's buffer when input k is planned (not external), has the output's
//     dtype and element count, and neither it nor anything sharing its buffer is used after
//     this node. The kernel must then tolerate out == in (element i is read before written).
// The groups become BufferRequests for AssignBuffers (buffer_assign.h).
//
// Deliberately left alone: the schedule itself (no reordering to shrink the peak), graph
// outputs written in place of intermediates (the engine owns their memory), and kernel
// scratch space.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "compiler/plan/buffer_assign.h"
#include "ir/graph.h"

namespace kiln::plan {

struct PlanOptions {
  int64_t alignment = 64;        // arena offsets and padded sizes are multiples of this
  bool in_place = true;          // let element-wise ops overwrite a dying input
  bool search_orderings = true;  // see AssignOptions
};

enum class AliasKind {
  kNone,     // owns its buffer
  kView,     // shares its source's bytes unchanged (Reshape & co.)
  kInPlace,  // overwrites its dying source's bytes (element-wise op)
};

struct ValuePlan {
  std::string name;
  int64_t size_bytes = 0;  // unpadded bytes of this value
  int64_t step = 0;        // the schedule step of its producer
  AliasKind alias = AliasKind::kNone;
  std::string alias_of;  // the direct source for kView/kInPlace, else empty
  // kView of a graph input, constant or graph output: not in the arena; `root` names the
  // external value whose memory it views, and offset/buffer are -1.
  bool external = false;
  std::string root;     // the value owning the storage (itself when alias == kNone)
  int64_t offset = -1;  // arena offset, -1 when external
  int buffer = -1;      // index into MemoryPlan::buffers, -1 when external
};

struct MemoryPlan {
  int64_t alignment = 64;
  std::vector<ValuePlan> values;          // every planned or external-view value, schedule order
  std::vector<BufferRequest> buffers;     // one per arena buffer, lifetimes after aliasing
  std::vector<std::string> buffer_owner;  // the value that owns each buffer
  BufferAssignment assignment;            // offsets of `buffers`
  int64_t arena_bytes = 0;
  int64_t naive_bytes = 0;        // every planned value padded and on its own, no reuse at all
  int64_t lower_bound_bytes = 0;  // largest padded live set at one step, after aliasing

  // nullptr when `name` is not planned (a graph input, output, constant, or unknown).
  const ValuePlan* Find(std::string_view name) const;
  // A human-readable summary: totals, the winning strategy, then one line per value.
  std::string Describe() const;

  std::unordered_map<std::string, size_t> index;  // name -> position in `values`
};

// The element-wise ops that may run in place: unary math, activations, binary arithmetic,
// Where, Clip (ai.onnx) and FusedElementwise (ai.kiln).
bool IsInPlaceElementwise(const Node& node);
// Whether the node's first output shares input 0's bytes (see the contract above).
bool IsViewOp(const Node& node);

absl::StatusOr<MemoryPlan> PlanMemory(const Graph& graph, const PlanOptions& options = {});

// Checks a plan's internal consistency: the buffer assignment is valid (ValidatePlan above),
// each value sits at its buffer's offset and fits in it, aliases share their root's offset,
// and external views have no offset. INTERNAL naming the value otherwise.
absl::Status ValidatePlan(const MemoryPlan& plan);

}  // namespace kiln::plan
