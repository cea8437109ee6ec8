#include "server/http/http.h"

#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <cstring>

#include "absl/strings/match.h"
#include "server/http/http_connection.h"
#include "server/http/http_generate.h"
#include "server/http/http_kserve.h"
#include "server/metrics/kiln_metrics.h"
#include "server/serving/readiness.h"
#include "server/serving/scrape_metrics.h"

namespace kiln::server {

namespace {

// A request the listener already read whole, as cpp-httplib's input; the response goes
// straight to the socket, bounded by a deadline so a client that does not read cannot hold a
// worker.
class BufferedRequestStream final : public httplib::Stream, public HttpConnection {
 public:
  BufferedRequestStream(int fd, std::string request, std::chrono::milliseconds write_timeout)
      : fd_(fd),
        request_(std::move(request)),
        timeout_(write_timeout),
        deadline_(std::chrono::steady_clock::now() + write_timeout) {}

  bool is_readable() const override { return pos_ < request_.size(); }
  bool is_writable() const override { return std::chrono::steady_clock::now() < deadline_; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, request_.size() - pos_);
    std::memcpy(ptr, request_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (taken_over_) return static_cast<ssize_t>(size);  // the handler answered already
    return WriteAll(ptr, size);
  }
  // A response the handler writes in parts (an event stream) gets the write timeout for
  // each part: the deadline moves on with every part written whole.
  bool Write(std::string_view bytes) override {
    if (WriteAll(bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) return false;
    deadline_ = std::chrono::steady_clock::now() + timeout_;
    return true;
  }
  void TakeOver() override { taken_over_ = true; }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    Address(getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    Address(getsockname, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  ssize_t WriteAll(const char* ptr, size_t size) {
    size_t done = 0;
    while (done < size) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline_ - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLOUT, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) return -1;
      const ssize_t n = send(fd_, ptr + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return -1;
      done += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(size);
  }
  void Address(int (*get)(int, sockaddr*, socklen_t*), std::string& ip, int& port) const {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    char host[NI_MAXHOST] = "", serv[NI_MAXSERV] = "";
    if (get(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
        getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      port = std::atoi(serv);
    }
  }

  const int fd_;
  const std::string request_;
  size_t pos_ = 0;
  const std::chrono::milliseconds timeout_;
  bool taken_over_ = false;
  std::chrono::steady_clock::time_point deadline_;
};

// `curl -d` labels a body application/x-www-form-urlencoded, which cpp-httplib then parses as
// a form and refuses past 8 KB. The v2 API never takes forms: its bodies are JSON (or the
// binary extension), so the label is corrected before cpp-httplib reads the request.
void RelabelFormBody(std::string& request) {
  const size_t head_end = request.find("\r\n\r\n");
  const size_t at = request.substr(0, head_end).find("application/x-www-form-urlencoded");
  if (at == std::string::npos) return;
  const size_t line = request.rfind('\n', at);
  const std::string_view name = std::string_view(request).substr(line + 1, 13);
  if (line == std::string::npos ||
      !absl::EqualsIgnoreCase(absl::string_view(name.data(), name.size()), "content-type:"))
    return;
  request.replace(at, std::strlen("application/x-www-form-urlencoded"), "application/json");
}

thread_local HttpConnection* current_connection = nullptr;

}  // namespace

HttpConnection* CurrentHttpConnection() { return current_connection; }
ScopedHttpConnection::ScopedHttpConnection(HttpConnection* c) : outer_(current_connection) {
  current_connection = c;
}
ScopedHttpConnection::~ScopedHttpConnection() { current_connection = outer_; }

// cpp-httplib's routing and response writing, fed by HttpListener instead of its own accept
// loop (whose thread per connection any eight slow clients could hold).
class HttpServer::Router : public httplib::Server {
 public:
  void Serve(httplib::Stream& stream) {
    bool closed = false;
    process_request(stream, /*close_connection=*/true, closed, [](httplib::Request&) {});
  }
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address,
                                                              ModelRegistry& registry,
                                                              const HttpOptions& options) {
  const HttpLimits& limits = options.limits;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("http address '", address, "' needs host:port"));
  }
  const std::string host = address.substr(0, colon);
  int port = 0;
  const std::string port_text = address.substr(colon + 1);
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("http address '", address, "': bad port"));
  }
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->router_ = std::make_unique<Router>();
  s->router_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  s->router_->Get("/readyz", [&registry](const httplib::Request&, httplib::Response& res) {
    const Readiness r = CheckReadiness(registry);
    res.status = r.ready ? 200 : 503;
    res.set_content(r.body, "text/plain");
  });
  s->router_->Get("/metrics", [&registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics::RenderAll(registry), metrics::kContentType);
  });
  // Before the v2 routes, whose catch-all would answer these paths.
  AddGenerateRoutes(*s->router_, registry, json::Limits{options.max_json_depth});
  AddKServeRoutes(*s->router_, registry, options);
  auto serve = [router = s->router_.get(), limits](int fd, std::string request) {
    // A v2 response may carry large tensors: it gets the time its request had to arrive.
    const bool api = IsApiLane(LaneOf(request));
    if (api) RelabelFormBody(request);
    BufferedRequestStream stream(fd, std::move(request),
                                 api ? limits.body_timeout : limits.write_timeout);
    {
      const ScopedHttpConnection current(&stream);
      router->Serve(stream);
    }
    close(fd);
  };
  ASSIGN_OR_RETURN(s->listener_, HttpListener::Start(host, port, limits, std::move(serve)));
  return s;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (listener_) listener_->Stop();
}

}  // namespace kiln::server
