// Values for inputs fixed before compiling: the model config's `bind_inputs` (a merged
// decoder's `use_cache_branch`) and the command line's `--bind NAME=V[,V...]`. A bound input
// becomes a constant of the graph and leaves its inputs, so folding and inline_constant_if
// see it as the constant it is.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::shape {

// Binds each named input to its values (one fills the input; bool takes nonzero as true;
// an integer type takes whole numbers). INVALID_ARGUMENT naming the input ("input 'x' ...")
// when the graph has no such input, its shape is not static, the value count is neither 1
// nor its element count, a value does not fit its type, or the type holds no numbers.
absl::Status BindInputValues(Graph& graph,
                             const std::map<std::string, std::vector<double>>& values);

}  // namespace kiln::shape
