// XXH3-128 of bytes as 32 hex digits (Debian's libxxhash-dev, inlined into content_hash.cc,
// so no binary gains a shared library). Not cryptographic: it names model files, engine
// cache entries and blobs, detects corrupt cache files and fingerprints the CPU's flags.
#pragma once

#include <string>
#include <string_view>

namespace kiln {

std::string ContentHash(std::string_view bytes);

}  // namespace kiln
