#include "server/common/stall_watchdog.h"

#include <algorithm>

namespace kiln::server {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

StallWatchdog::StallWatchdog(std::chrono::milliseconds timeout)
    : timeout_(timeout), thread_([this] { Run(); }) {}

StallWatchdog::~StallWatchdog() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

StallWatchdog::Watch::~Watch() {
  if (!owner_) return;
  std::lock_guard<std::mutex> lk(owner_->mu_);
  state_->cancel = nullptr;
}

void StallWatchdog::Watch::Touch() { state_->last_ns.store(NowNs(), std::memory_order_relaxed); }

bool StallWatchdog::Watch::fired() const { return state_->fired.load(); }

StallWatchdog::Watch StallWatchdog::Start(std::function<void()> cancel) {
  auto state = std::make_shared<State>();
  state->cancel = std::move(cancel);
  state->last_ns = NowNs();
  std::lock_guard<std::mutex> lk(mu_);
  watched_.push_back(state);
  return Watch(this, std::move(state));
}

void StallWatchdog::Run() {
  // Checks a few times per timeout: a stalled call ends between 1x and 1.25x the timeout.
  const auto period =
      std::max<std::chrono::milliseconds>(timeout_ / 4, std::chrono::milliseconds(1));
  std::unique_lock<std::mutex> lk(mu_);
  while (!wake_.wait_for(lk, period, [this] { return stop_; })) {
    const int64_t now = NowNs();
    const int64_t limit = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout_).count();
    std::erase_if(watched_, [](const std::weak_ptr<State>& w) { return w.expired(); });
    for (const auto& w : watched_) {
      std::shared_ptr<State> s = w.lock();
      if (!s || !s->cancel || s->fired || now - s->last_ns.load(std::memory_order_relaxed) < limit)
        continue;
      s->fired = true;
      s->cancel();
    }
  }
}

}  // namespace kiln::server
