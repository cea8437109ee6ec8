// inline_constant_if: an If whose condition is a constant is replaced by the nodes of the
// branch it takes. An If has no backend kernel: it runs on the reference fallback, its whole
// branch with it (a merged decoder's `If(use_cache_branch)` holds the entire model). Its
// condition is often known when the model is compiled: a shape test that folding makes
// constant (`if x.dim() == 4` in a torch export), or an input the configuration binds (a
// merged decoder served as its cache branch). Inlined, the branch's nodes are ordinary nodes
// that every later pass and every engine sees.
//
// The branch's values read from the enclosing graph (Node::captures) become the node's
// capture inputs, its constants become constants of the graph, and its nodes are inserted
// where the If was, each output under the branch's name when the graph has none such (else a
// fresh one). A branch output a branch node produces is written by that node straight into
// the If's output value (so a graph output keeps its name and its producer: a Concat that
// grows a cache stays the producer of `present`); one that is a capture, a constant or an
// output already written is copied by an Identity. Nested control flow inside the branch is
// moved as is (its bodies read their captures through the node's inputs, which are remapped).
// Leaves alone: a condition that is not a constant or holds other than one element, a branch
// missing, a branch with formal inputs (an If's have none), a branch whose output count
// differs from the node's. Runs shape inference again when it inlined anything.
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::passes {

absl::StatusOr<bool> InlineConstantIf(Graph& graph);

class InlineConstantIfPass : public Pass {
 public:
  std::string name() const override { return "inline_constant_if"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return InlineConstantIf(graph); }
};

}  // namespace kiln::passes
