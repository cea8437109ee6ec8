// Ends calls that stop making progress. gRPC's synchronous reader blocks until the client
// sends or the call ends, so a LoadModel stream whose client stops sending would hold its
// server thread and its upload slot forever; the watchdog cancels it instead. One thread
// watches every call.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::server {

class StallWatchdog {
  struct State;

 public:
  // A call that reports no progress for `timeout` gets its cancel function called (once).
  explicit StallWatchdog(std::chrono::milliseconds timeout);
  ~StallWatchdog();  // joins its thread; watches still alive are never fired after this
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

  // Move-only. Destroying it ends the watch: its cancel function is never called after.
  class Watch {
   public:
    Watch(Watch&& other) noexcept : owner_(other.owner_), state_(std::move(other.state_)) {
      other.owner_ = nullptr;
    }
    Watch& operator=(Watch&&) = delete;
    ~Watch();
    void Touch();        // progress: the timeout starts again
    bool fired() const;  // the cancel function was called
   private:
    friend class StallWatchdog;
    Watch(StallWatchdog* owner, std::shared_ptr<State> s) : owner_(owner), state_(std::move(s)) {}
    StallWatchdog* owner_;
    std::shared_ptr<State> state_;
  };

  // `cancel` runs on the watchdog's thread (under its lock): it must be quick and must not
  // call back into the watchdog.
  Watch Start(std::function<void()> cancel);

 private:
  struct State {
    std::atomic<int64_t> last_ns{0};  // steady clock, at the last progress
    std::atomic<bool> fired{false};
    std::function<void()> cancel;  // guarded by StallWatchdog::mu_; empty once unwatched
  };
  void Run();

  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;                          // guarded by mu_
  std::vector<std::weak_ptr<State>> watched_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace kiln::server
