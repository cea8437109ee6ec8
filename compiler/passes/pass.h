// The one pass interface. Run() is non-virtual: it times the pass, runs the verifier after it
// (when asked) and records what changed; each pass implements RunImpl. Every pass's algorithm
// is also exposed as a plain function in its header, so tests and tools can call it directly.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "compiler/passes/fold_cache.h"
#include "ir/graph.h"

namespace kiln::passes {

struct PassStats {
  std::string name;
  bool changed = false;
  size_t ops_after = 0;
  double ms = 0.0;
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string name() const = 0;
  // Runs the pass; with `verify`, the IR verifier must accept the result.
  absl::StatusOr<PassStats> Run(Graph& graph, bool verify = true);
  // Passes that derive tensors from constants take the cache shared by the compiles of one
  // model's buckets (fold_cache.h); the others ignore it.
  virtual void ShareFolds(std::shared_ptr<FoldCache> /*cache*/) {}

 protected:
  virtual absl::StatusOr<bool> RunImpl(Graph& graph) = 0;
};

}  // namespace kiln::passes
