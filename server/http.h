// The HTTP side door: GET /healthz (200 while the process serves), GET /readyz (200 only
// when every loaded model is READY, else 503 listing the models that are not, and why) and
// GET /metrics (Prometheus text format 0.0.4, server/metrics/kiln_metrics.h).
// Requests are admitted whole by HttpListener (slow clients never hold a thread) and then
// routed and answered by cpp-httplib.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "server/http_listener.h"
#include "server/model_registry.h"

namespace kiln::server {

class HttpServer {
 public:
  // Binds `address` ("host:port") and starts serving. `registry` must outlive the server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address,
                                                           const ModelRegistry& registry,
                                                           const HttpLimits& limits = {});
  ~HttpServer();  // Stop()s
  // Stops accepting, answers the requests already read, joins every thread. Idempotent.
  void Stop();

 private:
  class Router;
  HttpServer() = default;
  std::unique_ptr<Router> router_;  // declared first: the listener's workers use it
  std::unique_ptr<HttpListener> listener_;
};

// The /readyz verdict: ok, and one line per model that is not READY.
struct Readiness {
  bool ready = true;
  std::string body;
};
Readiness CheckReadiness(const ModelRegistry& registry);

}  // namespace kiln::server
