// The server configuration: config/server.yaml (embedded in the binary as the default),
// optionally replaced by --config FILE, then single options overridden by command-line flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/model/model_config.h"

namespace kiln::server {

// TLS for the gRPC port: PEM files, read at start. Without cert_file the port is plaintext.
struct TlsConfig {
  std::string cert_file;       // the server's certificate chain
  std::string key_file;        // its private key
  std::string client_ca_file;  // set: clients must present a certificate this CA signed (mTLS)
  bool enabled() const { return !cert_file.empty(); }
};

// The HTTP port's KServe v2 REST API (/v2): request size, time and concurrency limits. The
// probes and /metrics keep their own small fixed limits (server/http/http_listener.h).
struct HttpApiConfig {
  int64_t max_body_bytes = 64 << 20;       // one request's body (JSON and binary tensors)
  int64_t body_timeout_ms = 30000;         // accept to the whole request; writing the response
  int64_t body_idle_timeout_ms = 5000;     // longest a body may send nothing (408 after it)
  int64_t max_buffered_bytes = 256 << 20;  // all /v2 requests being received or handled
  int threads = 8;                         // /v2 requests handled at once
  // REST generate / generate_stream requests handled at once, on their own threads (each is
  // held while its tokens come); beyond it they queue.
  int generate_threads = 64;
  int max_json_depth = 32;  // nesting of arrays and objects in a request
};

struct ServerConfig {
  std::string grpc_address = "0.0.0.0:8500";
  std::string http_address = "0.0.0.0:8501";  // empty: no HTTP server
  int64_t max_message_bytes = 64 << 20;
  int64_t max_model_bytes = int64_t{1} << 30;
  // LoadModel calls in progress at once (receiving and building); more are refused.
  int max_concurrent_uploads = 4;
  // Bytes all uploads in progress may have received together (their staged files on disk).
  int64_t max_upload_bytes_in_flight = int64_t{2} << 30;
  // A LoadModel stream that sends nothing for this long is cancelled.
  int64_t upload_stall_timeout_ms = 30000;
  int64_t drain_timeout_ms = 10000;
  // What kilnd's tensors may take in all (weights, builds, requests, batches): 0 means 80 %
  // of the machine's memory (or of the cgroup's limit). Past it, what asks for more gets
  // RESOURCE_EXHAUSTED.
  int64_t memory_budget_bytes = 0;
  // What one model build may allocate within that: 0 means half the budget.
  int64_t max_build_memory_bytes = 0;
  std::string auth_token;  // empty: LoadModel/UnloadModel are open
  TlsConfig tls;
  HttpApiConfig http_api;
  std::string model_repository = "config/models";
  std::string engine_cache_dir;
  std::string log_level = "info";
  bool log_json = false;
  // Not finalized (buckets may be empty): each model finalizes its own copy after applying
  // its config.yaml, so a model may lower max_batch_size without restating the buckets.
  ModelConfig model_defaults;
};

// The YAML compiled into kilnd (config/server.yaml at build time).
const char* EmbeddedDefaultConfig();

// Parses server YAML over the built-in defaults. Unknown keys and bad values are
// INVALID_ARGUMENT naming the key; `where` (a file name) prefixes the message.
absl::StatusOr<ServerConfig> ParseServerConfig(const std::string& yaml, const std::string& where);

// Parses argv (without argv[0]): --config FILE first (else the embedded default), then the
// single-option flags over it. Both `--flag value` and `--flag=value` work. KILN_AUTH_TOKEN
// from the environment, when set, replaces auth_token.
absl::StatusOr<ServerConfig> LoadServerConfig(const std::vector<std::string>& args);

// The text of --help.
std::string UsageText();

}  // namespace kiln::server
