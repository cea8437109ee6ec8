#include "tools/kiln/dim_flag.h"

#include <algorithm>
#include <cmath>
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
  // 0 is a size too: a decoder's first step has an empty cache.
  if (num.empty() || *end || n < 0) {
    return absl::InvalidArgumentError("--dim " + name + ": '" + num +
                                      "' is not a size (0 or more)");
  }
  if (!dims.symbols.emplace(name, n).second) {
    return absl::InvalidArgumentError("--dim " + name + " given twice");
  }
  return absl::OkStatus();
}

absl::Status AddBindFlag(const std::string& value,
                         std::map<std::string, std::vector<double>>& binds) {
  const size_t eq = value.find('=');
  const std::string name = value.substr(0, eq);
  if (eq == std::string::npos || name.empty()) {
    return absl::InvalidArgumentError("--bind takes NAME=V[,V...] (got '" + value + "')");
  }
  std::vector<double> values;
  size_t at = eq + 1;
  while (at <= value.size()) {
    const size_t comma = std::min(value.find(',', at), value.size());
    const std::string v = value.substr(at, comma - at);
    char* end = nullptr;
    const double d = v == "true" ? 1.0 : v == "false" ? 0.0 : std::strtod(v.c_str(), &end);
    if (v.empty() || (end && *end) || !std::isfinite(d)) {
      return absl::InvalidArgumentError("--bind " + name + ": '" + v +
                                        "' is not a number or true/false");
    }
    values.push_back(d);
    at = comma + 1;
  }
  if (!binds.emplace(name, std::move(values)).second) {
    return absl::InvalidArgumentError("--bind " + name + " given twice");
  }
  return absl::OkStatus();
}

}  // namespace kiln::tools
