#include "server/http/http_listener.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>

namespace kiln::server {
namespace {

using Clock = std::chrono::steady_clock;

bool NameIs(std::string_view line, std::string_view name) {
  if (line.size() <= name.size() || line[name.size()] != ':') return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) != name[i]) return false;
  }
  return true;
}

std::string_view Trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r'))
    v.remove_suffix(1);
  return v;
}

absl::StatusOr<int> Listen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string service = std::to_string(port);
  if (getaddrinfo(h.empty() ? nullptr : h.c_str(), service.c_str(), &hints, &found) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("http address: cannot resolve '", host, "'"));
  }
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat("cannot listen on http address ", host, ":", port));
  return fd;
}

}  // namespace

Lane LaneOf(std::string_view request) {
  const size_t sp = request.find(' ');
  if (sp == std::string_view::npos) return Lane::kProbe;
  std::string_view target = request.substr(sp + 1);
  if (target.substr(0, 3) != "/v2") return Lane::kProbe;
  const char next = target.size() > 3 ? target[3] : ' ';
  if (next != '/' && next != ' ' && next != '?' && next != '\r' && next != '\n')
    return Lane::kProbe;
  target = target.substr(0, target.find_first_of(" ?\r\n"));
  // /v2/models/{m}[/versions/{v}]/generate[_stream]: the model name holds no '/'.
  if (target.substr(0, 11) != "/v2/models/" || target.find('/', 11) == std::string_view::npos) {
    return Lane::kApi;
  }
  const std::string_view tail = target.substr(target.rfind('/') + 1);
  return tail == "generate" || tail == "generate_stream" ? Lane::kGenerate : Lane::kApi;
}

RequestHead ParseRequestHead(std::string_view bytes, const HttpLimits& limits) {
  RequestHead h;
  size_t end = bytes.find("\r\n\r\n");
  size_t head_len = end == std::string_view::npos ? 0 : end + 4;
  if (const size_t lf = bytes.find("\n\n");
      lf != std::string_view::npos && (!head_len || lf + 2 < head_len)) {
    head_len = lf + 2;
  }
  if (head_len == 0 || head_len > limits.max_request_bytes) {
    h.state = bytes.size() > limits.max_request_bytes ? RequestState::kTooLarge
                                                      : RequestState::kIncomplete;
    return h;
  }
  h.head_done = true;
  h.head_bytes = head_len;
  h.lane = LaneOf(bytes);
  std::string_view head = bytes.substr(0, head_len);
  head.remove_prefix(std::min(head.size(), head.find('\n') + 1));  // the request line
  bool length_seen = false;
  while (!head.empty()) {
    const size_t nl = head.find('\n');
    const std::string_view line = head.substr(0, nl);
    head.remove_prefix(nl == std::string_view::npos ? head.size() : nl + 1);
    if (NameIs(line, "transfer-encoding")) {
      h.state = RequestState::kBad;
      return h;
    }
    if (NameIs(line, "expect")) {
      const std::string_view v = Trim(line.substr(7));
      h.expect_continue =
          v.size() == 12 && std::equal(v.begin(), v.end(), "100-continue",
                                       [](char a, char b) { return std::tolower(a) == b; });
    }
    if (!NameIs(line, "content-length")) continue;
    const std::string_view v = Trim(line.substr(15));
    size_t n = 0;
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    // Two Content-Lengths that differ are a 400 (RFC 9112, 6.3): cpp-httplib reads the first,
    // and a listener reading another would wait for a body the handler never sees.
    if (ec != std::errc() || ptr != v.data() + v.size() || (length_seen && n != h.body_bytes)) {
      h.state = RequestState::kBad;
      return h;
    }
    h.body_bytes = n;
    length_seen = true;
  }
  const bool too_large = IsApiLane(h.lane) ? h.body_bytes > limits.max_body_bytes
                                           : h.body_bytes > limits.max_request_bytes ||
                                                 head_len + h.body_bytes > limits.max_request_bytes;
  if (too_large) {
    h.state = RequestState::kTooLarge;
  } else if (bytes.size() >= head_len + h.body_bytes) {
    h.state = RequestState::kComplete;
  }
  return h;
}

RequestState ParseRequestState(std::string_view bytes, size_t max_bytes) {
  HttpLimits limits;
  limits.max_request_bytes = max_bytes;
  limits.max_body_bytes = max_bytes;
  return ParseRequestHead(bytes, limits).state;
}

void WriteStatusAndClose(int fd, int status, std::string_view reason) {
  const std::string text = absl::StrCat("HTTP/1.1 ", status, " ", std::string(reason),
                                        "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  (void)!send(fd, text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  close(fd);
}

absl::StatusOr<std::unique_ptr<HttpListener>> HttpListener::Start(const std::string& host, int port,
                                                                  const HttpLimits& limits,
                                                                  Handler handler) {
  ASSIGN_OR_RETURN(const int fd, Listen(host, port));
  std::unique_ptr<HttpListener> l(new HttpListener(limits, std::move(handler)));
  l->listen_fd_ = fd;
  if (pipe2(l->wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError("http: cannot create the wake-up pipe");
  }
  for (const auto& [lane, n] :
       {std::pair(Lane::kProbe, limits.workers), std::pair(Lane::kApi, limits.api_workers),
        std::pair(Lane::kGenerate, limits.generate_workers)}) {
    for (int i = 0; i < n; ++i) {
      l->lanes_[static_cast<int>(lane)].threads.emplace_back(
          [raw = l.get(), lane = lane] { raw->Work(lane); });
    }
  }
  l->loop_ = std::thread([raw = l.get()] { raw->Loop(); });
  return l;
}

HttpListener::~HttpListener() { Stop(); }

void HttpListener::Stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  (void)!write(wake_[1], "x", 1);
  if (loop_.joinable()) loop_.join();
  for (Workers& lane : lanes_) {
    lane.ready.notify_all();
    for (auto& w : lane.threads) w.join();
  }
  for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void HttpListener::Loop() {
  std::vector<pollfd> fds;
  while (true) {
    const auto now = Clock::now();
    // While accepting is paused (out of descriptors) the listening socket is not polled:
    // it would stay readable and spin the loop.
    const bool accepting = now >= accept_paused_until_;
    fds.assign({{accepting ? listen_fd_ : -1, POLLIN, 0}, {wake_[0], POLLIN, 0}});
    int timeout_ms = accepting ? -1 : kAcceptPauseMs;
    for (const Pending& p : pending_) {
      fds.push_back({p.fd, POLLIN, 0});
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(p.deadline - now).count();
      timeout_ms = timeout_ms < 0 ? std::max<int>(0, left)
                                  : std::min<int>(timeout_ms, std::max<int>(0, left));
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
    if (fds[1].revents) break;  // Stop()
    // Read what arrived, then drop what ran out of time; both keep the oldest-first order.
    std::vector<Pending> still;
    const auto after = Clock::now();
    for (size_t i = 0; i < pending_.size(); ++i) {
      Pending& p = pending_[i];
      if (fds[i + 2].revents && !ReadSome(p)) continue;
      if (after >= p.deadline) {
        WriteStatusAndClose(p.fd, 408, "Request Timeout");
        Release(p.charged);
        continue;
      }
      still.push_back(std::move(p));
    }
    pending_ = std::move(still);
    if (fds[0].revents) AcceptAll();
  }
  for (Pending& p : pending_) Close(p);
  pending_.clear();
}

void HttpListener::AcceptAll() {
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors: the backlog keeps the rest while the pending ones finish.
      if (errno == EMFILE || errno == ENFILE) {
        accept_paused_until_ = Clock::now() + std::chrono::milliseconds(kAcceptPauseMs);
      }
      return;  // EAGAIN: all taken
    }
    if (pending_.size() >= limits_.max_pending) {
      // The oldest has had the longest to send its request: it goes, the newcomer waits.
      Close(pending_.front());
      pending_.erase(pending_.begin());
    }
    const auto now = Clock::now();
    pending_.push_back({fd, now, now + limits_.request_timeout, {}, std::nullopt, 0});
  }
}

void HttpListener::Close(Pending& p) {
  close(p.fd);
  Release(p.charged);
  p.charged = 0;
}

bool HttpListener::TryCharge(size_t bytes) {
  size_t now = buffered_.load();
  do {
    if (bytes > limits_.max_buffered_bytes || now > limits_.max_buffered_bytes - bytes)
      return false;
  } while (!buffered_.compare_exchange_weak(now, now + bytes));
  return true;
}

bool HttpListener::HeadArrived(Pending& p, const RequestHead& head) {
  p.head = head;
  const size_t total = head.head_bytes + head.body_bytes;
  if (IsApiLane(head.lane) && head.body_bytes > 0) {
    // Address space only: pages become resident (and are charged) as the body arrives.
    p.bytes.reserve(total);
    if (!BodyArrived(p)) return false;
  }
  if (head.expect_continue && p.bytes.size() < total) {
    static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    (void)!send(p.fd, kContinue, sizeof kContinue - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  return true;
}

bool HttpListener::BodyArrived(Pending& p) {
  const size_t total = p.head->head_bytes + p.head->body_bytes;
  const size_t held = std::min(p.bytes.size(), total);
  if (held > p.charged) {
    if (!TryCharge(held - p.charged)) {
      WriteStatusAndClose(p.fd, 503, "Service Unavailable");
      Release(p.charged);
      return false;
    }
    p.charged = held;
  }
  // A body must keep coming: one that stalls is dropped after body_idle_timeout, whatever
  // is left of body_timeout, so a client cannot hold its charge by sending nothing.
  p.deadline =
      std::min(p.accepted + limits_.body_timeout, Clock::now() + limits_.body_idle_timeout);
  return true;
}

bool HttpListener::ReadSome(Pending& p) {
  // Large enough that a 64 MB body is a thousand reads, not sixteen thousand.
  static thread_local std::vector<char> buf(64 << 10);
  while (true) {
    const ssize_t n = recv(p.fd, buf.data(), buf.size(), 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) {
      Close(p);  // the client went away (or the socket failed)
      return false;
    }
    p.bytes.append(buf.data(), static_cast<size_t>(n));
    if (!p.head) {
      // Until the head is whole it is searched for again; after, only sizes are compared.
      const RequestHead h = ParseRequestHead(p.bytes, limits_);
      if (h.state == RequestState::kTooLarge || h.state == RequestState::kBad) {
        const bool large = h.state == RequestState::kTooLarge;
        WriteStatusAndClose(p.fd, large ? 413 : 400, large ? "Payload Too Large" : "Bad Request");
        return false;
      }
      if (!h.head_done) continue;
      if (!HeadArrived(p, h)) return false;
    } else if (IsApiLane(p.head->lane) && p.head->body_bytes > 0 && !BodyArrived(p)) {
      return false;
    }
    if (p.bytes.size() >= p.head->head_bytes + p.head->body_bytes) {
      Admit(p);
      return false;
    }
  }
}

void HttpListener::Admit(Pending& p) {
  Workers& lane = lanes_[static_cast<int>(p.head ? p.head->lane : Lane::kProbe)];
  std::unique_lock<std::mutex> lk(mu_);
  if (lane.queue.size() >= limits_.max_queued) {
    lk.unlock();
    WriteStatusAndClose(p.fd, 503, "Service Unavailable");
    Release(p.charged);
    return;
  }
  const int flags = fcntl(p.fd, F_GETFL);
  fcntl(p.fd, F_SETFL, flags & ~O_NONBLOCK);
  lane.queue.push_back({p.fd, std::move(p.bytes), p.charged});
  lk.unlock();
  lane.ready.notify_one();
}

void HttpListener::Work(Lane which) {
  Workers& lane = lanes_[static_cast<int>(which)];
  while (true) {
    Whole w;
    {
      std::unique_lock<std::mutex> lk(mu_);
      lane.ready.wait(lk, [&] { return stopping_ || !lane.queue.empty(); });
      if (lane.queue.empty()) return;  // stopping, and every admitted request answered
      w = std::move(lane.queue.front());
      lane.queue.pop_front();
    }
    handler_(w.fd, std::move(w.request));
    Release(w.charged);  // the handler is done with the request's bytes
  }
}

}  // namespace kiln::server
