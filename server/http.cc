#include "server/http.h"

#include <httplib.h>

#include "server/metrics/kiln_metrics.h"

namespace kiln::server {

Readiness CheckReadiness(const ModelRegistry& registry) {
  Readiness r;
  if (!registry.repository_loaded()) {
    r.ready = false;
    r.body = "loading the model repository\n";
  }
  for (const auto& mv : registry.List()) {
    if (mv->state() == ModelState::kReady) continue;
    r.ready = false;
    absl::StrAppend(&r.body, mv->name(), " version ", mv->version(), ": ",
                    ModelStateName(mv->state()), mv->reason().empty() ? "" : " (",
                    mv->reason(), mv->reason().empty() ? "" : ")", "\n");
  }
  if (r.ready) r.body = "ready\n";
  return r;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address,
                                                              const ModelRegistry& registry) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("http address '", address, "' needs host:port"));
  }
  const std::string host = address.substr(0, colon);
  int port = 0;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (...) {
    return absl::InvalidArgumentError(absl::StrCat("http address '", address, "': bad port"));
  }
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->server_ = std::make_unique<httplib::Server>();
  s->server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  s->server_->Get("/readyz", [&registry](const httplib::Request&, httplib::Response& res) {
    const Readiness r = CheckReadiness(registry);
    res.status = r.ready ? 200 : 503;
    res.set_content(r.body, "text/plain");
  });
  s->server_->Get("/metrics", [&registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics::RenderAll(registry), metrics::kContentType);
  });
  if (!s->server_->bind_to_port(host, port)) {
    return absl::UnavailableError(absl::StrCat("cannot listen on http address ", address));
  }
  s->thread_ = std::thread([raw = s->server_.get()] { raw->listen_after_bind(); });
  return s;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace kiln::server
