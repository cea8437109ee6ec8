#include "server/http_listener.h"

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

RequestState ParseRequestState(std::string_view bytes, size_t max_bytes) {
  size_t end = bytes.find("\r\n\r\n");
  size_t head_len = end == std::string_view::npos ? 0 : end + 4;
  if (const size_t lf = bytes.find("\n\n");
      lf != std::string_view::npos && (!head_len || lf + 2 < head_len)) {
    head_len = lf + 2;
  }
  if (head_len == 0)
    return bytes.size() > max_bytes ? RequestState::kTooLarge : RequestState::kIncomplete;
  size_t body = 0;
  std::string_view head = bytes.substr(0, head_len);
  head.remove_prefix(std::min(head.size(), head.find('\n') + 1));  // the request line
  while (!head.empty()) {
    const size_t nl = head.find('\n');
    const std::string_view line = head.substr(0, nl);
    head.remove_prefix(nl == std::string_view::npos ? head.size() : nl + 1);
    if (NameIs(line, "transfer-encoding")) return RequestState::kBad;
    if (!NameIs(line, "content-length")) continue;
    const std::string_view v = Trim(line.substr(15));
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), body);
    if (ec != std::errc() || ptr != v.data() + v.size()) return RequestState::kBad;
  }
  if (body > max_bytes || head_len + body > max_bytes) return RequestState::kTooLarge;
  return bytes.size() >= head_len + body ? RequestState::kComplete : RequestState::kIncomplete;
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
  for (int i = 0; i < limits.workers; ++i)
    l->workers_.emplace_back([raw = l.get()] { raw->Work(); });
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
  ready_.notify_all();
  for (auto& w : workers_) w.join();
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
        continue;
      }
      still.push_back(std::move(p));
    }
    pending_ = std::move(still);
    if (fds[0].revents) AcceptAll();
  }
  for (const Pending& p : pending_) close(p.fd);
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
      close(pending_.front().fd);
      pending_.erase(pending_.begin());
    }
    pending_.push_back({fd, Clock::now() + limits_.request_timeout, {}});
  }
}

bool HttpListener::ReadSome(Pending& p) {
  char buf[4096];
  while (true) {
    const ssize_t n = recv(p.fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) {
      close(p.fd);  // the client went away (or the socket failed)
      return false;
    }
    p.bytes.append(buf, static_cast<size_t>(n));
    switch (ParseRequestState(p.bytes, limits_.max_request_bytes)) {
      case RequestState::kIncomplete:
        continue;
      case RequestState::kComplete:
        Admit(p);
        return false;
      case RequestState::kTooLarge:
        WriteStatusAndClose(p.fd, 413, "Payload Too Large");
        return false;
      case RequestState::kBad:
        WriteStatusAndClose(p.fd, 400, "Bad Request");
        return false;
    }
  }
}

void HttpListener::Admit(Pending& p) {
  std::unique_lock<std::mutex> lk(mu_);
  if (queue_.size() >= limits_.max_queued) {
    lk.unlock();
    WriteStatusAndClose(p.fd, 503, "Service Unavailable");
    return;
  }
  const int flags = fcntl(p.fd, F_GETFL);
  fcntl(p.fd, F_SETFL, flags & ~O_NONBLOCK);
  queue_.push_back({p.fd, std::move(p.bytes)});
  lk.unlock();
  ready_.notify_one();
}

void HttpListener::Work() {
  while (true) {
    Whole w;
    {
      std::unique_lock<std::mutex> lk(mu_);
      ready_.wait(lk, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every admitted request answered
      w = std::move(queue_.front());
      queue_.pop_front();
    }
    handler_(w.fd, std::move(w.request));
  }
}

}  // namespace kiln::server
