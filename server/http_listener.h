// The HTTP port's front door. Probes (/healthz, /readyz) and scrapes (/metrics) must answer
// however many clients are slow: a kubelet restarts a pod whose liveness probe times out. So
// a connection gets a handler thread only once its whole request has arrived. Until then it
// waits in one poll loop, costing a file descriptor and a few KB, for at most request_timeout
// from accept; at most max_pending such connections are kept (a new one closes the oldest, so
// a probe that arrives always gets its turn: it sends its request in one packet).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/status.h"

namespace kiln::server {

struct HttpLimits {
  std::chrono::milliseconds request_timeout{2000};  // accept to the whole request
  std::chrono::milliseconds write_timeout{2000};    // writing the response
  size_t max_request_bytes = 16 << 10;              // request line, headers and body
  size_t max_pending = 512;                         // connections still sending their request
  size_t max_queued = 256;                          // whole requests waiting for a worker
  int workers = 2;
};

enum class RequestState { kIncomplete, kComplete, kTooLarge, kBad };

// Whether `bytes` (what a connection sent so far) holds a whole request: the head up to its
// blank line, then the body its Content-Length announces. Chunked bodies are kBad (probes and
// scrapes never send one). A pure function, so the admission rule is tested without sockets.
RequestState ParseRequestState(std::string_view bytes, size_t max_bytes);

class HttpListener {
 public:
  // Runs on a worker thread with a whole request. Owns `fd` (a blocking socket): it must
  // answer and close it.
  using Handler = std::function<void(int fd, std::string request)>;

  // Binds host:port and starts the poll loop and the workers.
  static absl::StatusOr<std::unique_ptr<HttpListener>> Start(const std::string& host, int port,
                                                             const HttpLimits& limits,
                                                             Handler handler);
  ~HttpListener();  // Stop()s
  // Stops accepting, closes connections still sending, lets the workers finish the requests
  // they hold, joins every thread. Idempotent.
  void Stop();

 private:
  struct Pending {
    int fd;
    std::chrono::steady_clock::time_point deadline;
    std::string bytes;
  };
  struct Whole {
    int fd;
    std::string request;
  };

  HttpListener(const HttpLimits& limits, Handler handler)
      : limits_(limits), handler_(std::move(handler)) {}
  void Loop();
  void AcceptAll();
  // Reads what `p` has sent; false when it is done waiting (admitted or closed).
  bool ReadSome(Pending& p);
  void Admit(Pending& p);
  void Work();

  static constexpr int kAcceptPauseMs = 50;

  const HttpLimits limits_;
  const Handler handler_;
  std::chrono::steady_clock::time_point accept_paused_until_;  // the poll loop's own
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};        // a pipe: Stop() writes to end the poll
  std::vector<Pending> pending_;  // the poll loop's own, oldest first
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<Whole> queue_;  // guarded by mu_
  bool stopping_ = false;    // guarded by mu_
  std::thread loop_;
  std::vector<std::thread> workers_;
};

// An answer written straight to a socket (408, 413, 503 when no handler runs): best effort,
// never blocking.
void WriteStatusAndClose(int fd, int status, std::string_view reason);

}  // namespace kiln::server
