#include "server/grpc/grpc_credentials.h"

#include <grpcpp/security/server_credentials.h>

#include "base/file.h"

namespace kiln::server {
namespace {

// grpc accepts any bytes here and fails later, on the first handshake, with a log line the
// operator may never see; checking for a PEM block up front turns that into a start error.
absl::StatusOr<std::string> ReadPem(const std::string& key, const std::string& path) {
  std::optional<std::string> text = ReadWholeFile(path);
  if (!text)
    return absl::NotFoundError(absl::StrCat("server.tls.", key, ": cannot read '", path, "'"));
  if (text->find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("server.tls.", key, ": '", path, "' is not a PEM file"));
  }
  return *std::move(text);
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsConfig& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain, ReadPem("cert_file", tls.cert_file));
  ASSIGN_OR_RETURN(pair.private_key, ReadPem("key_file", tls.key_file));
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!tls.client_ca_file.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs, ReadPem("client_ca_file", tls.client_ca_file));
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

}  // namespace kiln::server
