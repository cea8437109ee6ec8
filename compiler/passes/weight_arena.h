// One buffer for the weights a pass derives (fold_batchnorm's rescaled Conv/Gemm weights),
// backed by transparent huge pages.
//
// Why: on this project's VMs the first touch of a fresh 4 KB page costs ~14-40 us, so a pass
// writing ResNet-50's 100 MB of rescaled weights into fresh tensors spent ~0.4-1 s in page
// faults (and the zero-fill Tensor's constructor does first) for ~20 ms of arithmetic. One
// 2 MB-aligned block asked for huge pages faults 50 times instead of 25,000 (100 MB: ~1 s ->
// ~30 ms, measured), and untouched parts of it (folds that did not happen, or that a
// FoldCache answered) cost address space only.
//
// The block is allocated at the first Take, sized for everything the pass may take (the caller
// sums it up front); the tensors are views that keep it alive, so it lives as long as any of
// them (the constants of one model's graphs and its FoldCache).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "ir/tensor.h"

namespace kiln::passes {

class WeightArena {
 public:
  // Room for tensors of these byte sizes (each is padded to 64 bytes).
  static size_t Footprint(size_t nbytes) { return (nbytes + 63) / 64 * 64; }
  explicit WeightArena(size_t capacity) : capacity_(capacity) {}

  // An uninitialized tensor carved from the block; a plain tensor when the block is full
  // (the caller's sizes were short) or could not be allocated.
  Tensor Take(DType dtype, std::vector<int64_t> shape);

 private:
  size_t capacity_ = 0, used_ = 0;
  bool tried_ = false;
  std::shared_ptr<void> block_;
};

}  // namespace kiln::passes
