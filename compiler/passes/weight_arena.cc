#include "compiler/passes/weight_arena.h"

#include <sys/mman.h>

#include <cstdlib>

namespace kiln::passes {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// A 2 MB-aligned block the kernel may back with huge pages (THP in "madvise" mode, Debian's
// default, gives them only to memory that asks). Null on failure.
std::shared_ptr<void> HugePageBlock(size_t bytes) {
  const size_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, size);
  if (p == nullptr) return nullptr;
  madvise(p, size, MADV_HUGEPAGE);  // advice only: without it the pages are 4 KB
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

}  // namespace

Tensor WeightArena::Take(DType dtype, std::vector<int64_t> shape) {
  const size_t bytes = Footprint(static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype));
  // Small blocks are not worth a huge page each.
  if (!tried_ && capacity_ >= kHugePage) block_ = HugePageBlock(capacity_);
  tried_ = true;
  if (!block_ || used_ + bytes > capacity_) return Tensor::Uninitialized(dtype, std::move(shape));
  void* at = static_cast<char*>(block_.get()) + used_;
  used_ += bytes;
  return Tensor::View(dtype, std::move(shape), block_, at);
}

}  // namespace kiln::passes
