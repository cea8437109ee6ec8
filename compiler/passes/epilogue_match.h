// The matcher shared by fuse_conv_epilogue and fuse_matmul_epilogue: starting at a Conv or
// MatMul output, it walks forward over
//   [bias Add] [activation] [residual Add [activation]]
// and records what a fused node needs. Every value it swallows must have exactly one
// consumer and not be a graph output; the first node that breaks the pattern ends the match
// (a shorter match is still a valid fusion).
#pragma once

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "ir/graph.h"
#include "ir/kiln_ops.h"

namespace kiln::passes {

struct EpilogueMatch {
  std::vector<Node*> swallowed;         // absorbed nodes, in schedule order
  Value* output = nullptr;              // the value the fused node produces
  std::optional<Tensor> bias;           // per-channel bias ([channels]) from a bias Add
  std::vector<kiln_ops::EpilogueStep> steps;
  std::vector<Value*> residuals;        // one per "Add" step
};

struct EpilogueOptions {
  int64_t channel_axis = 1;      // output axis a bias varies along (1 for conv, -1 for matmul)
  int64_t channels = -1;         // size of that axis (must be known)
  bool allow_bias = true;        // false when the primary already has a non-constant bias
};

// Matches and replaces epilogues over one graph for a whole pass run. The readers of every
// value are indexed once, in schedule order as Graph::Consumers gives them, and kept current
// through each replacement; the node list is edited once, at Finish. (Graph::Consumers,
// InsertNode and RemoveNode each walk the graph: per fusion that was quadratic.)
class EpilogueFuser {
 public:
  explicit EpilogueFuser(Graph& graph);
  Graph& graph() { return graph_; }

  // The longest epilogue after `start`; steps empty and swallowed empty when nothing matches.
  EpilogueMatch Match(Value* start, const EpilogueOptions& options) const;
  // Replaces `first` (the primary node) and the swallowed nodes by `fused`, placed where the
  // last swallowed node was (every input of the fused node is defined by then).
  void Replace(Node* first, const EpilogueMatch& m, std::unique_ptr<Node> fused);
  // Applies the replacements to the node list; true when there were any.
  bool Finish();

 private:
  // Only reader of v, or nullptr when v has several (or none) or is a graph output.
  Node* SoleConsumer(const Value* v) const;
  const std::vector<Node*>& Readers(const Value* v) const;
  Node* MatchSilu(const Value* v) const;
  bool TakeActivation(Value*& cur, EpilogueMatch& m) const;

  Graph& graph_;
  absl::flat_hash_map<const Node*, size_t> position_;
  absl::flat_hash_map<const Value*, std::vector<Node*>> readers_;  // in position order
  absl::flat_hash_set<const Value*> outputs_;
  std::vector<std::pair<Node*, std::unique_ptr<Node>>> inserts_;
  std::vector<Node*> removed_;
};

}  // namespace kiln::passes
