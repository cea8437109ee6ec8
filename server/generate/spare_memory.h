// The memory of a step's tensors kept when its shape changes, for the tensors of the next
// shape.
//
// Why: a decode group's shape changes as it runs (rows join and leave its batch bucket, its
// longest row crosses a class of the cache's length), and each change used to free the
// group's presents and make new ones. kilnd maps each buffer of 1 MiB or more on its own
// (base/heap_scope.h), so a new 25 MB group (8 rows of a 4-layer hidden-256 decoder at a
// 384-position class) was ~6000 page faults at ~14 us on this project's VMs: 16 streams of
// that decoder took 80k-190k faults per burst, most of their time. Kept memory is only
// zeroed again. What the groups' new shapes do not take stays for later steps (up to what the
// kept buffers hold, StepBufferSet::TrimSpare) and, when the loop goes idle, for the next
// burst (GenerationConfig::keep_step_memory_ms): a burst's groups grow through the same
// shapes as the last one's, and fresh memory is faulted and zeroed by the kernel first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ir/tensor.h"

namespace kiln::server::generate {

// Thread-safe: the generation loop's lanes (step_lanes.h) take from and give to one set.
class SpareMemory {
 public:
  // Keeps the memory of every tensor in `tensors` (each buffer once) that nothing outside
  // `tensors` holds; the rest is dropped with them.
  void Keep(std::vector<Tensor> tensors);
  // A zero tensor of `dtype` and `shape`: on the smallest kept buffer that holds it and is at
  // most twice its size (or 2 MiB), else a fresh one (charged as any, to the memory account in
  // scope), on huge pages from kHugePageFrom bytes (base/huge_pages.h).
  Tensor Zeros(DType dtype, std::vector<int64_t> shape);
  // Keeps buffers up to `bytes` in all, largest first (they hold any smaller tensor; one
  // that does not fit is skipped for smaller ones), and frees the rest.
  void Trim(int64_t bytes);
  // Frees what is kept.
  void Clear() { Trim(0); }
  size_t blocks() const {
    std::lock_guard<std::mutex> lk(mu_);
    return blocks_.size();
  }
  // The bytes kept (as the tensors they held used them).
  int64_t bytes() const;

 private:
  struct Block {
    std::shared_ptr<void> owner;
    size_t bytes = 0;
  };
  // Buffers handed out by Zeros and their whole sizes, while something holds them.
  struct Handed {
    std::weak_ptr<void> owner;
    size_t capacity = 0;
  };
  mutable std::mutex mu_;
  std::vector<Block> blocks_;   // guarded by mu_
  std::vector<Handed> handed_;  // guarded by mu_
};

}  // namespace kiln::server::generate
