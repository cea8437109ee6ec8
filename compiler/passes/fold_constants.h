// fold_constants: evaluates every node whose inputs are all constant with the reference kernel
// and replaces its outputs by constants. Covers the shape-computing subgraphs that become
// constant once Specialize has bound the batch size.
// Preconditions: shapes inferred (output sizes must be known to apply the size cap).
// Leaves alone: non-deterministic operators (Random*, Multinomial, Bernoulli, training-mode
// Dropout); nodes whose outputs would exceed the size cap (folding must never inflate the
// model: a Tile or ConstantOfShape to gigabytes stays a node; a DequantizeLinear may grow
// its 8-bit weights to float32); nodes whose kernel fails.
// With a FoldCache (shared by the compiles of one model's buckets), a fold over large inputs
// is looked up before it is computed (compiler/passes/fold_cache.h).
#pragma once

#include <memory>

#include "compiler/passes/fold_cache.h"
#include "compiler/passes/pass.h"

namespace kiln::passes {

struct FoldConstantsOptions {
  // A folded node may produce at most max(this, the bytes of its constant inputs).
  size_t max_growth_bytes = size_t{1} << 16;
  std::shared_ptr<FoldCache> cache;  // null: every fold is computed
};

absl::StatusOr<bool> FoldConstants(Graph& graph, const FoldConstantsOptions& options = {});

class FoldConstantsPass : public Pass {
 public:
  explicit FoldConstantsPass(FoldConstantsOptions options = {}) : options_(options) {}
  std::string name() const override { return "fold_constants"; }
  void ShareFolds(std::shared_ptr<FoldCache> cache) override { options_.cache = std::move(cache); }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return FoldConstants(graph, options_); }

 private:
  FoldConstantsOptions options_;
};

}  // namespace kiln::passes
