// Graph building shared by the decoder rewrites made at load: the mask added to a decoder
// exported without one (cache_mask.cc) and the positions read from a decoder's own mask
// (mask_positions.cc).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::server::mask_graph {

// Sizes at which the keys' axis (past + sequence), the cache's length and the batch are told
// apart from every other dim: a dim or value that has them at both is theirs.
struct Probe {
  int64_t batch, past, seq;
};
inline constexpr Probe kProbes[] = {{3, 5, 2}, {2, 11, 4}};

// Appends `op` (in the internal opset's form) and returns its one output.
Value* Op(Graph& g, const std::string& op, std::vector<Value*> in,
          std::map<std::string, Attribute> attrs = {});

// A 1-D int64 constant.
Value* Ints(Graph& g, std::vector<int64_t> v);

// float32 1.0 where `mask` (any numeric or bool dtype) is not 0, else 0.0: a stray 2 neither
// doubles a key nor overflows what is computed from it.
Value* Real(Graph& g, Value* mask);

// Cast of `x` to `to`.
Value* CastTo(Graph& g, Value* x, DType to);

}  // namespace kiln::server::mask_graph
