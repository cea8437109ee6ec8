// `--dim NAME=N` on the command line: a value for a symbolic input dim (compile, bench).
#pragma once

#include <string>

#include "base/status.h"
#include "compiler/shape/bind_dims.h"

namespace kiln::tools {

// Adds NAME=N to dims.symbols; INVALID_ARGUMENT for anything else (no '=', empty name, N not
// a positive integer, NAME given twice).
absl::Status AddDimFlag(const std::string& value, shape::InputDims& dims);

}  // namespace kiln::tools
