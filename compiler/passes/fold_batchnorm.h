// fold_batchnorm: an inference-mode BatchNormalization is an affine map per channel,
// y = s * x + t with s = gamma / sqrt(var + eps) and t = beta - mean * s.
//  - After Conv / ConvTranspose with constant weights (and bias, if any) it folds into them:
//    W' = s * W along the output-channel axis, b' = s * (b - mean) + beta.
//  - After Gemm with a constant B (2-D output, channel = columns) it folds into B and C.
//  - Otherwise (a standalone BatchNormalization with constant parameters) it becomes
//    Mul(x, s) + Add(t) with s and t shaped [C, 1, ..., 1], which later passes may fuse.
// Preconditions: shapes inferred. Leaves alone: training mode or any extra output used,
// non-constant parameters, producers with another consumer (the weights are shared with a
// value someone else reads), MatMul producers (their channel axis is not BatchNorm's).
// With a FoldCache shared by one model's bucket compiles, each rescaled weight is computed
// once and is one tensor in every bucket (so the engines share its packed copy too).
#pragma once

#include <memory>

#include "compiler/passes/pass.h"

namespace kiln::passes {

absl::StatusOr<bool> FoldBatchNorm(Graph& graph);
// The same, deriving the rescaled weights through `cache` (null: as FoldBatchNorm).
absl::StatusOr<bool> FoldBatchNormWithCache(Graph& graph, FoldCache* cache);

class FoldBatchNormPass : public Pass {
 public:
  std::string name() const override { return "fold_batchnorm"; }
  void ShareFolds(std::shared_ptr<FoldCache> cache) override { cache_ = std::move(cache); }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override {
    return FoldBatchNormWithCache(graph, cache_.get());
  }

 private:
  std::shared_ptr<FoldCache> cache_;
};

}  // namespace kiln::passes
