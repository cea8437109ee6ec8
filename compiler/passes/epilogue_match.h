// The matcher shared by fuse_conv_epilogue and fuse_matmul_epilogue: starting at a Conv or
// MatMul output, it walks forward over
//   [bias Add] [activation] [residual Add [activation]]
// and records what a fused node needs. Every value it swallows must have exactly one
// consumer and not be a graph output; the first node that breaks the pattern ends the match
// (a shorter match is still a valid fusion).
#pragma once

#include <optional>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/ir/kiln_ops.h"

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

// The longest epilogue after `start`; steps empty and swallowed empty when nothing matches.
EpilogueMatch MatchEpilogue(const Graph& graph, Value* start, const EpilogueOptions& options);

// Only consumer of v, or nullptr when v has several (or none) or is a graph output.
Node* SoleConsumer(const Graph& graph, const Value* v);

// Replaces `first` (the primary node) and the swallowed nodes by `fused`, placed where the
// last swallowed node was (every input of the fused node is defined by then).
void ReplaceWithFused(Graph& graph, Node* first, const EpilogueMatch& m,
                      std::unique_ptr<Node> fused);

}  // namespace kiln::passes
