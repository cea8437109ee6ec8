// fold_pad: a zero constant Pad that only pads spatial dims, read by a Conv or an
// AveragePool, moves into that reader's own `pads` (exporters write TensorFlow's "SAME" and
// PyTorch's avg_pool2d(padding=p) this way: Inception v3 has nine Pad -> AveragePool pairs).
// The reader then pads as part of its kernel instead of a copy of the whole tensor.
//  - Conv (auto_pad NOTSET or VALID): its pads grow by the Pad's, elementwise. Exact: the
//    padded positions are zeros either way.
//  - AveragePool (auto_pad NOTSET or VALID, ceil_mode 0): with count_include_pad 1 its pads
//    grow; with count_include_pad 0 only when its own pads are all zero, and it becomes
//    count_include_pad 1 (the Pad's zeros were real elements the average counted).
// Each reader is folded on its own; the Pad stays while any other reader needs it.
// Preconditions: constants folded (the pads must be a constant), shapes inferred (rank).
// Leaves alone: other modes (reflect, edge, wrap), a non-zero or non-constant fill value,
// negative pads (a crop), pads on the batch or channel dims, MaxPool (its implicit padding
// is -inf, not zero), ceil_mode 1 (a window may reach past the padded end, where the two
// forms count differently), and a Pad output that is a graph output (only its readers change).
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::passes {

absl::StatusOr<bool> FoldPad(Graph& graph);

class FoldPadPass : public Pass {
 public:
  std::string name() const override { return "fold_pad"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return FoldPad(graph); }
};

}  // namespace kiln::passes
