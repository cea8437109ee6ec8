// Client-chosen text (model, input and output names) quoted back in error messages, bounded:
// a status message travels in a response header, and a 10 KB name would push it past the
// client's metadata limit, so the client would see RESOURCE_EXHAUSTED instead of the answer.
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace kiln::server {

inline constexpr size_t kMaxEchoedChars = 64;

// `text` when short; else its first kMaxEchoedChars bytes, "...", and the full length.
// Control bytes become '?', so a name cannot break a log line either.
inline std::string EchoName(std::string_view text) {
  std::string out(text.substr(0, kMaxEchoedChars));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  if (text.size() > kMaxEchoedChars) absl::StrAppend(&out, "...(", text.size(), " bytes)");
  return out;
}

}  // namespace kiln::server
