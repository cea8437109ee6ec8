// The HTTP port's front door. Probes (/healthz, /readyz) and scrapes (/metrics) must answer
// however many clients are slow: a kubelet restarts a pod whose liveness probe times out. So
// a connection gets a handler thread only once its whole request has arrived. Until then it
// waits in one poll loop, costing a file descriptor and a few KB, for at most request_timeout
// from accept; at most max_pending such connections are kept (a new one closes the oldest, so
// a probe that arrives always gets its turn: it sends its request in one packet).
//
// Requests under /v2 (the KServe v2 REST API) form a second lane: their bodies carry tensors,
// so they may be up to max_body_bytes and take up to body_timeout to arrive, and they run on
// their own workers (an inference waits for its model; a probe must not wait behind it). The
// bytes such requests hold, from their arrival to the end of their handler, are bounded
// together by max_buffered_bytes: charged as they arrive (not as a head announces them, so
// idle connections announcing large bodies hold nothing), and a request whose bytes do not
// fit is answered 503 at once. A body that sends nothing for body_idle_timeout gets 408.
// Probes are never charged against that budget, so large or slow uploads can fill it without
// touching them. Generation requests (`/v2/models/.../generate` and `generate_stream`) are
// API requests on a third lane with workers of their own: each holds its worker for as long as
// its tokens come (seconds), so on the inference lane sixteen streams would hold eight workers
// and queue the rest, and every inference behind them; a generation worker only waits on the
// generation loop, whose own limits (running and waiting sequences) bound the work.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
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
  size_t max_queued = 256;  // whole requests waiting for a worker (per lane)
  int workers = 2;
  // The /v2 lane: a request's body, accept to the whole request (and writing the response),
  // the bytes all its requests may hold at once, and its workers.
  size_t max_body_bytes = 64 << 20;
  std::chrono::milliseconds body_timeout{30000};
  std::chrono::milliseconds body_idle_timeout{5000};  // longest a body may send nothing
  size_t max_buffered_bytes = 256 << 20;
  int api_workers = 8;
  int generate_workers = 64;  // the generation lane's
};

enum class RequestState { kIncomplete, kComplete, kTooLarge, kBad };
// kApi: request targets under /v2; kGenerate: those naming a model's generate or
// generate_stream (an API request too: bodies, charges and timeouts as kApi's).
enum class Lane { kProbe, kApi, kGenerate };
inline bool IsApiLane(Lane l) { return l != Lane::kProbe; }

// What the head of a request says, once it has arrived.
struct RequestHead {
  RequestState state = RequestState::kIncomplete;  // of the whole request
  bool head_done = false;                          // the head up to its blank line has arrived
  size_t head_bytes = 0, body_bytes = 0;
  Lane lane = Lane::kProbe;
  bool expect_continue = false;  // "Expect: 100-continue": the client waits to be told
};

// Whether `bytes` (what a connection sent so far) holds a whole request: the head up to its
// blank line, then the body its Content-Length announces. Chunked bodies are kBad (probes,
// scrapes and the v2 clients never send one). The body may be max_request_bytes (head
// included) on the probe lane, max_body_bytes on the API lane. Pure functions, so the
// admission rule is tested without sockets.
RequestHead ParseRequestHead(std::string_view bytes, const HttpLimits& limits);
// The same with one limit for every lane.
RequestState ParseRequestState(std::string_view bytes, size_t max_bytes);
// The lane of a request, from its request line.
Lane LaneOf(std::string_view request);

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
    std::chrono::steady_clock::time_point accepted, deadline;
    std::string bytes;
    std::optional<RequestHead> head;  // once its head has arrived
    size_t charged = 0;               // bytes held against max_buffered_bytes
  };
  struct Whole {
    int fd;
    std::string request;
    size_t charged = 0;
  };
  struct Workers {  // one lane's queue and threads
    std::condition_variable ready;
    std::deque<Whole> queue;  // guarded by mu_
    std::vector<std::thread> threads;
  };

  HttpListener(const HttpLimits& limits, Handler handler)
      : limits_(limits), handler_(std::move(handler)) {}
  void Loop();
  void AcceptAll();
  // Reads what `p` has sent; false when it is done waiting (admitted or closed).
  bool ReadSome(Pending& p);
  // `p`'s head has arrived: start charging an API body, extend its deadline, answer
  // "100 Continue". False when it was refused (and closed).
  bool HeadArrived(Pending& p, const RequestHead& head);
  // More of an API request's body has arrived: charges it to the budget (503 and closed when
  // it does not fit: false) and moves the deadline by body_idle_timeout.
  bool BodyArrived(Pending& p);
  void Admit(Pending& p);
  void Close(Pending& p);  // closes and releases its charge
  bool TryCharge(size_t bytes);
  void Release(size_t bytes) { buffered_.fetch_sub(bytes); }
  void Work(Lane lane);

  static constexpr int kAcceptPauseMs = 50;

  const HttpLimits limits_;
  const Handler handler_;
  std::chrono::steady_clock::time_point accept_paused_until_;  // the poll loop's own
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};           // a pipe: Stop() writes to end the poll
  std::vector<Pending> pending_;     // the poll loop's own, oldest first
  std::atomic<size_t> buffered_{0};  // bytes charged by API requests not yet answered
  std::mutex mu_;
  Workers lanes_[3];       // indexed by Lane
  bool stopping_ = false;  // guarded by mu_
  std::thread loop_;
};

// An answer written straight to a socket (408, 413, 503 when no handler runs): best effort,
// never blocking.
void WriteStatusAndClose(int fd, int status, std::string_view reason);

}  // namespace kiln::server
