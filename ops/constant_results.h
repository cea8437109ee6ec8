// Results of nodes whose inputs are all graph constants, kept across runs of one model's
// graphs. The warm-up check runs the reference on a fresh clone of the imported graph at
// every shape it checks, and a clone shares its constants' buffers: a node over them (a
// tied embedding's Transpose for the output projection) gives the same tensor every time.
// Recomputed, an 8 MB Transpose faulted in 2048 new pages per check run on a decoder
// checked at each new length. The compiler's FoldCache (compiler/passes/fold_cache.h) is the
// implementation: the compile's constant folding stores the same nodes under the same keys
// (operator, attributes and the identity of the input buffers), computed by the same
// reference kernels, so the values are the ones the reference would compute.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "ir/graph.h"
#include "ops/kernel.h"

namespace kiln::ref {

// Nodes reading fewer bytes than this are computed, not looked up: small shape
// computations are cheap and differ per shape.
inline constexpr size_t kMinConstantBytes = size_t{1} << 16;

class ConstantResults {
 public:
  virtual ~ConstantResults() = default;
  // The outputs kept for `node` over these constant inputs, if any.
  virtual std::optional<std::vector<Tensor>> Find(const Node& node,
                                                  const KernelInputs& inputs) const = 0;
  virtual void Store(const Node& node, const KernelInputs& inputs,
                     const std::vector<Tensor>& outputs) = 0;
};

// Finds in `base` and keeps nothing: for runs whose constants later runs do not share. A
// shape built on demand folds its shape computations into small constants of its own, and a
// node over one of them and a weight would be kept once per shape, in a cache that lives as
// long as the model.
class FindOnly : public ConstantResults {
 public:
  explicit FindOnly(std::shared_ptr<ConstantResults> base) : base_(std::move(base)) {}
  std::optional<std::vector<Tensor>> Find(const Node& node,
                                          const KernelInputs& inputs) const override {
    return base_->Find(node, inputs);
  }
  void Store(const Node&, const KernelInputs&, const std::vector<Tensor>&) override {}

 private:
  std::shared_ptr<ConstantResults> base_;
};

}  // namespace kiln::ref
