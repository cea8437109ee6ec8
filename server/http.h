// The HTTP side door: GET /healthz (200 while the process serves), GET /readyz (200 only
// when every loaded model is READY, else 503 listing the models that are not, and why) and
// GET /metrics (Prometheus text format 0.0.4, server/metrics/kiln_metrics.h).
// Served by cpp-httplib on its own threads.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "base/status.h"
#include "server/model_registry.h"

namespace httplib {
class Server;
}

namespace kiln::server {

class HttpServer {
 public:
  // Binds `address` ("host:port") and starts serving. `registry` must outlive the server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address,
                                                           const ModelRegistry& registry);
  ~HttpServer();  // Stop()s
  // Stops accepting and joins the listener thread. Idempotent.
  void Stop();

 private:
  HttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

// The /readyz verdict: ok, and one line per model that is not READY.
struct Readiness {
  bool ready = true;
  std::string body;
};
Readiness CheckReadiness(const ModelRegistry& registry);

}  // namespace kiln::server
