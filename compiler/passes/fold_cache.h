// Results of fold_constants shared by the compiles of one model's batch buckets.
//
// Every bucket compiles its own clone of the imported graph, and the clones share the weights'
// buffers. A fold over the weights (a Transpose of a MatMul's weight, a Reshape of a Conv's)
// gives the same tensor in every bucket: without a cache, a ViT-L/16 folded ~1.2 GB of
// transposed weights four times, and each bucket's engine then prepacked its own copy. With
// it, the buckets get one folded tensor (and so one shared prepacked copy, see
// runtime/cpu/build_context.h).
//
// A node's result is looked up by its operator, attributes and the identity of its input
// buffers (address, dtype, shape), never their bytes: hashing gigabytes would cost what the
// fold does. An entry keeps its inputs alive, so an address in a key can never be reused by
// another tensor while the entry exists; constants are immutable once in a graph. Only
// nodes reading at least kMinInputBytes are cached: the small shape computations differ per
// bucket and are cheap.
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "ops/constant_results.h"

namespace kiln::passes {

// Also the reference interpreter's ConstantResults (ops/constant_results.h): the warm-up
// check's runs find the compile's folds, and keep theirs, here.
class FoldCache : public ref::ConstantResults {
 public:
  static constexpr size_t kMinInputBytes = ref::kMinConstantBytes;

  // Whether a fold of these inputs is worth a lookup.
  static bool Worth(const std::vector<const Tensor*>& inputs);
  // The outputs stored for `node` over these inputs, if any.
  std::optional<std::vector<Tensor>> Find(const Node& node,
                                          const std::vector<const Tensor*>& inputs) const override;
  void Store(const Node& node, const std::vector<const Tensor*>& inputs,
             const std::vector<Tensor>& outputs) override;
  // The same for tensors another pass derives from constants (fold_batchnorm's rescaled
  // weights): `what` names the derivation and everything it depends on besides the buffers
  // `inputs` (null entries allowed); `make` runs on a miss and its result is kept.
  std::vector<Tensor> Derive(const std::string& what, const std::vector<const Tensor*>& inputs,
                             const std::function<std::vector<Tensor>()>& make);
  size_t hits() const;
  size_t size() const;

 private:
  struct Entry {
    std::vector<Tensor> inputs;  // held so their addresses stay theirs
    std::vector<Tensor> outputs;
  };
  static std::string Key(const Node& node, const std::vector<const Tensor*>& inputs);
  static std::string BuffersKey(const std::vector<const Tensor*>& inputs);
  std::optional<std::vector<Tensor>> Lookup(const std::string& key) const;  // counts a hit
  void Put(std::string key, const std::vector<const Tensor*>& inputs,
           const std::vector<Tensor>& outputs);

  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
  mutable size_t hits_ = 0;
};

}  // namespace kiln::passes
