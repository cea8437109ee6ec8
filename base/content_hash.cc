#include "base/content_hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdio>

namespace kiln {

std::string ContentHash(std::string_view bytes) {
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return hex;
}

}  // namespace kiln
