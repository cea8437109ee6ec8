// The step tensors a generation loop keeps between iterations (server/generate/generator.h).
//
// Why: a fresh multi-MiB step tensor is mapped, faulted in and zeroed again, and an appending
// group's rows regathered whole (8 rows of a 4-layer hidden-256 decoder at a 384-position
// class: 25 MB, ~6000 faults of ~14 us on this project's VMs). Each decode group keeps its own
// buffers until its shape changes, so a burst of prefill chunks at other shapes does not push
// the running groups' buffers out (they did while all shared one list of four: every
// iteration that prefilled made both groups of 16 streams again). When a group's shape
// changes, its old buffers go to spare() for the step being built (SpareMemory), and what that
// step does not take is freed with it. Steps of one iteration run side by side on lanes
// (server/generate/step_lanes.h): each decode group is one lane's at a time, each lane keeps
// its own prefill buffers, and the spare memory is shared under its own lock.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <list>
#include <vector>

#include "ir/tensor.h"
#include "server/generate/spare_memory.h"
#include "server/generate/step.h"

namespace kiln::server::generate {

// A step's input and output tensors, kept for the next step of the same shape and group.
struct StepBuffers {
  std::vector<int64_t> key;  // rows, tokens, past, group
  std::vector<Tensor> in, out;
  HeldRows held;  // appending steps: the sequences `out` holds
};

class StepBufferSet {
 public:
  explicit StepBufferSet(int lanes = 1) : prefill_(static_cast<size_t>(std::max(lanes, 1))) {}
  // At GPT-2-small size an 8-row appending group at a 639-position class holds about 380 MB:
  // at most kKeptGroups groups keep theirs; later groups and prefill share kKeptPrefill.
  static constexpr size_t kKeptGroups = 8, kKeptPrefill = 2;

  // Before an iteration's decode groups run: room for `groups` of them (For never resizes
  // while lanes run).
  void MakeGroups(size_t groups) {
    groups = std::min(groups, kKeptGroups);  // later groups share the lanes' prefill lists
    if (decode_.size() < groups) decode_.resize(groups);
  }
  // The buffers of that shape for the `group`-th decode group of an iteration (< the groups
  // made; -1: a prefill step on `lane`). A decode group's buffers of another shape go to
  // spare().
  StepBuffers& For(int64_t rows, int64_t count, int64_t past, int64_t group, int lane = 0);
  // Decode groups from `groups` on hold no rows now.
  void TrimGroups(size_t groups);
  SpareMemory& spare() { return spare_; }
  // Between iterations: spare() keeps at most as much as the kept buffers held at their
  // most since the loop last held nothing (a burst's groups start small and grow through the
  // shapes the last burst's took: trimmed to what they hold now, the large buffers would go
  // at its first iteration). Returns HeldBytes() after it.
  int64_t TrimSpare() {
    const int64_t kept = KeptBytes();
    peak_kept_ = std::max(peak_kept_, kept);
    spare_.Trim(peak_kept_);
    return kept + spare_.bytes();
  }
  // An idle loop: every kept buffer goes to spare(), for the next burst's steps.
  void Park();
  // Holds nothing.
  void Clear();
  // Bytes of the tensors kept and of spare(), each buffer once.
  int64_t HeldBytes() const { return KeptBytes() + spare_.bytes(); }
  // Bytes of the tensors kept, each buffer once.
  int64_t KeptBytes() const;

 private:
  std::vector<StepBuffers> decode_;              // by group ordinal
  std::vector<std::list<StepBuffers>> prefill_;  // by lane, most recently used first
  SpareMemory spare_;
  int64_t peak_kept_ = 0;  // KeptBytes' most since the last Clear
};

}  // namespace kiln::server::generate
