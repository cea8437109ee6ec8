// Values a model's integer and mask inputs can really take, read from how the graph uses
// them, so the warm-up check feeds what a client would send instead of a flat random range.
// A flat [0, 10] draw for an attention mask makes the additive mask (1 - mask) * -10000 reach
// +9e4, where a float32 engine and the double-precision reference part ways although every
// kernel is right; a token id beyond a small vocabulary makes Gather refuse the feed.
//
// Two uses are recognised, each after any chain of value-preserving ops (Cast to a
// non-bool type, Unsqueeze, Squeeze, Reshape, Flatten, Expand, Identity, Transpose, Slice of
// the data, Gather of the data):
//   - an index into a table: Gather's indices. The input is drawn from [0, n - 1], n the
//     data's size on the gathered axis (the smallest such table when it indexes several).
//   - a mask: Sub(1, x) (the additive mask), Where's condition, a Cast to bool, Not/And/Or/
//     Xor, and Equal with a scalar 0 or 1 (mask == 0) unless the input also indexes a
//     table (ids compared with the padding id). The input is drawn from {0, 1}.
// Inputs used neither way get no hint (the configured int_range / float_range apply).
#pragma once

#include <map>
#include <string>

#include "ir/graph.h"

namespace kiln::check {

struct InputHint {
  double lo = 0, hi = 0;  // inclusive
  bool binary = false;    // a mask: only 0 and 1 (floats too)
  std::string why;        // "indexes 'word_emb' (1000 rows)", "mask (Sub(1, x))"
};

// Hints for the graph's inputs, by name. Shapes of the tables must be known (the imported
// graph's constants are); a table of unknown size is not used as a bound.
std::map<std::string, InputHint> InferInputHints(const Graph& graph);

}  // namespace kiln::check
