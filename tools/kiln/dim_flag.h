// `--dim NAME=N` on the command line: a value for a symbolic input dim (compile, bench);
// `--bind NAME=V[,V...]`: values that fix an input (compiler/shape/bind_values.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/shape/bind_dims.h"

namespace kiln::tools {

// Adds NAME=N to dims.symbols; INVALID_ARGUMENT for anything else (no '=', empty name, N not
// a positive integer, NAME given twice).
absl::Status AddDimFlag(const std::string& value, shape::InputDims& dims);

// Adds NAME=V[,V...] (numbers, or true/false) to `binds`; INVALID_ARGUMENT for no '=', an
// empty name, a value that is neither, or NAME given twice.
absl::Status AddBindFlag(const std::string& value,
                         std::map<std::string, std::vector<double>>& binds);

}  // namespace kiln::tools
