// The checks every transport (kiln.v1 gRPC, KServe v2 gRPC and REST) makes on a tensor's
// declared shape before it reads any data: one rule, so the protocols cannot drift.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace kiln::server {

// The element count of a request shape: no negative dim, rank <= 16, at most 2^40 elements
// (a shape alone must never make the server allocate). INVALID_ARGUMENT naming `what`.
template <class Dims>
absl::StatusOr<int64_t> CheckedElementCount(const Dims& shape, const std::string& what) {
  if (shape.size() > 16) return absl::InvalidArgumentError(absl::StrCat(what, ": rank above 16"));
  int64_t n = 1;
  for (const int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": negative dim ", d));
    if (d > 0 && n > (int64_t{1} << 40) / d) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": shape too large"));
    }
    n *= d;
  }
  return n;
}

}  // namespace kiln::server
