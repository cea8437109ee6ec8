// The HTTP port: GET /healthz (200 while the process serves), GET /readyz (200 only when
// every loaded model is READY, else 503 listing the models that are not, and why), GET
// /metrics (Prometheus text format 0.0.4, server/metrics/kiln_metrics.h), and the KServe v2
// REST API under /v2 (server/http/http_kserve.h). Requests are admitted whole by HttpListener
// (slow clients never hold a thread; /v2 requests have their own size limit and workers) and
// then routed and answered by cpp-httplib.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "server/http/http_listener.h"
#include "server/serving/model_registry.h"

namespace kiln::server {

struct HttpOptions {
  HttpLimits limits;
  std::string auth_token;   // /v2 repository load/unload need "Authorization: Bearer <token>"
  int max_json_depth = 32;  // nesting of /v2 request bodies
};

class HttpServer {
 public:
  // Binds `address` ("host:port") and starts serving. `registry` must outlive the server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address,
                                                           ModelRegistry& registry,
                                                           const HttpOptions& options = {});
  ~HttpServer();  // Stop()s
  // Stops accepting, answers the requests already read, joins every thread. Idempotent.
  void Stop();

 private:
  class Router;
  HttpServer() = default;
  std::unique_ptr<Router> router_;  // declared first: the listener's workers use it
  std::unique_ptr<HttpListener> listener_;
};

}  // namespace kiln::server
