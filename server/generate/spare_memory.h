// The memory of a step's tensors kept when its shape changes, for the tensors of the next
// shape.
//
// Why: a decode group's shape changes as it runs (rows join and leave its batch bucket, its
// longest row crosses a class of the cache's length), and each change used to free the
// group's presents and make new ones. kilnd maps each buffer of 1 MiB or more on its own
// (base/heap_scope.h), so a new 25 MB group (8 rows of a 4-layer hidden-256 decoder at a
// 384-position class) was ~6000 page faults at ~14 us on this project's VMs: 16 streams of
// that decoder took 80k-190k faults per burst, most of their time. Kept memory is only
// zeroed again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ir/tensor.h"

namespace kiln::server::generate {

class SpareMemory {
 public:
  // Keeps the memory of every tensor in `tensors` (each buffer once) that nothing outside
  // `tensors` holds; the rest is dropped with them.
  void Keep(std::vector<Tensor> tensors);
  // A zero tensor of `dtype` and `shape`: on the smallest kept buffer that holds it, else a
  // fresh one (charged as any, to the memory account in scope), on huge pages from
  // kHugePageFrom bytes (base/huge_pages.h).
  Tensor Zeros(DType dtype, std::vector<int64_t> shape);
  // Frees what is kept.
  void Clear() { blocks_.clear(); }
  size_t blocks() const { return blocks_.size(); }
  // The bytes kept (as the tensors they held used them).
  int64_t bytes() const {
    int64_t n = 0;
    for (const Block& b : blocks_) n += static_cast<int64_t>(b.bytes);
    return n;
  }

 private:
  struct Block {
    std::shared_ptr<void> owner;
    size_t bytes = 0;
  };
  std::vector<Block> blocks_;
};

}  // namespace kiln::server::generate
