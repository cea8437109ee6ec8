// fold_channel_shuffle: data movement along one axis written as reshapes and transposes
// becomes one Gather with constant indices, and slices of it gather only what they keep.
//  - Channel shuffle: Reshape(x, [.., g, C/g, ..]) -> Transpose swapping those two axes ->
//    Reshape back to x's shape (ShuffleNet's channel_shuffle, written so by PyTorch and
//    TensorFlow exporters alike, in NCHW or NHWC) is a permutation of x's axis a:
//    Gather(x, idx, axis=a), idx[j*g + i] = i*(C/g) + j. One pass over the tensor instead
//    of a transpose (and, in a CPU engine, the layout reorders around it).
//  - Slice of a Gather along the Gather's axis only (constant starts, ends, steps) becomes a
//    Gather of the sliced indices from the Gather's source: ShuffleNet's chunk of the
//    shuffled channels reads its half straight from the block's output.
//  - A Split of such a Gather along its axis: one Gather of each part's indices.
//  - Gather(Gather(x, i1, a), i2, a), both indices constant: Gather(x, i1[i2], a).
// Exact: every output element is the same input element as before.
// Preconditions: shapes inferred and static on the values matched; constants folded (the
// reshape targets, slice bounds and indices must be constants).
// Leaves alone: a reshape or transpose whose result has another reader or is a graph output
// (it must stay computed), transposes that move other axes too, slices over other axes or
// with non-constant bounds, Gathers with non-constant or non-1-D indices.
#pragma once

#include "compiler/passes/pass.h"

namespace kiln::passes {

absl::StatusOr<bool> FoldChannelShuffle(Graph& graph);

class FoldChannelShufflePass : public Pass {
 public:
  std::string name() const override { return "fold_channel_shuffle"; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override { return FoldChannelShuffle(graph); }
};

}  // namespace kiln::passes
