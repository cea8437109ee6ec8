#include "server/common/auth.h"

#include "absl/strings/match.h"

namespace kiln::server {

absl::Status CheckBearer(const std::string& token, std::optional<std::string_view> authorization) {
  if (token.empty()) return absl::OkStatus();
  if (!authorization) {
    return absl::UnauthenticatedError("this call needs 'authorization: Bearer <token>' metadata");
  }
  // credentials = auth-scheme 1*SP token68, the scheme case-insensitive (RFC 9110, 11.1 and
  // 11.4): "bearer t" and "BEARER  t" are the same credentials as "Bearer t".
  std::string_view v = *authorization;
  const size_t sp = v.find(' ');
  const bool bearer = sp != std::string_view::npos &&
                      absl::EqualsIgnoreCase(absl::string_view(v.data(), sp), "bearer");
  std::string_view got = bearer ? v.substr(sp) : std::string_view();
  while (!got.empty() && got.front() == ' ') got.remove_prefix(1);
  // Every byte is compared whatever the first difference, so the time taken does not tell
  // how much of a guess was right.
  unsigned char diff = bearer && got.size() == token.size() ? 0 : 1;
  for (size_t i = 0; i < token.size(); ++i) {
    const char c = i < got.size() ? got[i] : '\0';
    diff |= static_cast<unsigned char>(c ^ token[i]);
  }
  if (diff != 0) return absl::PermissionDeniedError("the bearer token is not accepted");
  return absl::OkStatus();
}

}  // namespace kiln::server
