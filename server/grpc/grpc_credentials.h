// The gRPC port's credentials: plaintext, TLS, or mutual TLS, per the server config.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>

#include "base/status.h"
#include "server/serving/config.h"

namespace kiln::server {

// Reads the PEM files named by `tls` (NOT_FOUND naming the file that cannot be read;
// INVALID_ARGUMENT for a file that is not PEM). Insecure credentials when TLS is off.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsConfig& tls);

}  // namespace kiln::server
