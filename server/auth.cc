#include "server/auth.h"

namespace kiln::server {

absl::Status CheckBearer(const std::string& token, std::optional<std::string_view> authorization) {
  if (token.empty()) return absl::OkStatus();
  if (!authorization) {
    return absl::UnauthenticatedError("this call needs 'authorization: Bearer <token>' metadata");
  }
  const std::string expected = "Bearer " + token;
  // Every byte is compared whatever the first difference, so the time taken does not tell
  // how much of a guess was right.
  unsigned char diff = authorization->size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const char got = i < authorization->size() ? (*authorization)[i] : '\0';
    diff |= static_cast<unsigned char>(got ^ expected[i]);
  }
  if (diff != 0) return absl::PermissionDeniedError("the bearer token is not accepted");
  return absl::OkStatus();
}

}  // namespace kiln::server
