// A model's output cut to its last position along one axis, with the work that only the cut
// positions needed removed: the graph a decoder's prefill runs, which samples one token from
// the last position of a chunk of its prompt. The vocabulary projection (and the final norm
// before it) then runs on one row instead of the whole chunk: at GPT-2-small size that
// projection is about a third of the multiply-adds of a prefill step.
//
// The edit walks back from the output through nodes whose result at a position along the
// axis reads only that position of the inputs that carry the axis ("position-wise": element-
// wise ops whose other operands do not vary along it, MatMul's rows, normalizations and
// softmaxes and keepdims reductions over later axes, casts) and cuts those inputs to their
// last position with a Slice, so everything after the cut computes one position. A node whose
// result is also read elsewhere (another output, a node not cut) stays whole; attention, which
// mixes positions, is where the walk stops in a transformer.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::shape {

struct LastPositionCut {
  int nodes = 0;         // nodes that now compute the last position only
  int products = 0;      // of them, MatMul/Gemm: the work the cut saves is mostly theirs
  int slices = 0;        // Slice (or, by the mask, Gather) nodes inserted
  bool by_mask = false;  // the position is the mask's last real one, not the last
};

// Cuts `output` (a graph output) to its last position along `axis` (its dim there becomes 1;
// a symbolic dim is taken to be at least 1, as every profile's sizes are).
// Shapes are inferred first (symbolic dims allowed). INVALID_ARGUMENT when there is no such
// output or its rank does not hold the axis; FAILED_PRECONDITION (the graph unchanged) when
// the output's producer is not position-wise along the axis, so that nothing would be saved.
//
// With `mask` (a graph input [batch, past + positions] whose last `positions` entries mark the
// new positions, 1 real and 0 padding, as a decoder step's attention mask does), the position
// kept is the last real one of the mask's first row: (its count of ones among the new
// positions) - 1, gathered at run time, so a chunk padded at its end up to the engine's size
// still yields its own last position (every row of a generation step feeds the same count;
// no real position means the last one, as without the mask). INVALID_ARGUMENT when `mask` is
// not a rank-2 input; FAILED_PRECONDITION when the graph's opset is below 13 (ReduceSum's
// axes as an input).
absl::StatusOr<LastPositionCut> CutToLastPosition(Graph& graph, const std::string& output,
                                                  int64_t axis, const std::string& mask = "");

}  // namespace kiln::shape
