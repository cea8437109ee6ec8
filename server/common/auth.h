// The bearer-token rule every transport applies to the calls that change what is loaded
// (kiln.v1 LoadModel/UnloadModel, v2 RepositoryModelLoad/Unload over gRPC and REST): with a
// token configured, the caller must send `authorization: Bearer <token>` (gRPC metadata or
// the HTTP Authorization header). Inference, health and metadata stay open.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace kiln::server {

// OK when `token` is empty (no authentication) or `authorization` is "Bearer <token>" (the
// scheme in any case, as HTTP's are);
// UNAUTHENTICATED when the header is absent, PERMISSION_DENIED when it is wrong. The token is
// compared in constant time.
absl::Status CheckBearer(const std::string& token, std::optional<std::string_view> authorization);

}  // namespace kiln::server
