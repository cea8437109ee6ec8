#include "tools/kiln/dim_flag.h"

#include <cstdlib>

namespace kiln::tools {

absl::Status AddDimFlag(const std::string& value, shape::InputDims& dims) {
  const size_t eq = value.find('=');
  const std::string name = value.substr(0, eq);
  if (eq == std::string::npos || name.empty()) {
    return absl::InvalidArgumentError("--dim takes NAME=N (got '" + value + "')");
  }
  const std::string num = value.substr(eq + 1);
  char* end = nullptr;
  const long long n = std::strtoll(num.c_str(), &end, 10);
  if (num.empty() || *end || n < 1) {
    return absl::InvalidArgumentError("--dim " + name + ": '" + num + "' is not a positive size");
  }
  if (!dims.symbols.emplace(name, n).second) {
    return absl::InvalidArgumentError("--dim " + name + " given twice");
  }
  return absl::OkStatus();
}

}  // namespace kiln::tools
