// Stopping long load-time work: compiling, engine builds and their warm-up runs, layout
// tuning, the reference interpreter's warm-up check. A server must be able to shut down
// while a model compiles (SIGTERM), and a tuner must be able to give up on a candidate that
// runs far past its budget, without either waiting for the work to end by itself.
//
// The work polls CheckStop() between steps it can abandon (kernels of a run, nodes of the
// reference, passes, buckets): OK, or DEADLINE_EXCEEDED / CANCELLED once the innermost
// StopScope on this thread says so. Scopes nest: an inner one keeps every outer deadline and
// flag. Serving runs open none, and then the poll is one thread-local load.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "base/status.h"

namespace kiln {

struct StopCondition {
  using Clock = std::chrono::steady_clock;
  StopCondition() = default;
  StopCondition(Clock::time_point d, const std::atomic<bool>* c, std::string w)
      : deadline(d), cancel(c), what(std::move(w)) {}
  Clock::time_point deadline = Clock::time_point::max();
  const std::atomic<bool>* cancel = nullptr;  // not owned; set means stop
  std::string what;                           // names the work in the error ("layout tuning")
  // Not owned; stop once every one is set: the requests of a batch, each set when its
  // client stops waiting (a batch still runs while one of its requests is waited for).
  std::vector<const std::atomic<bool>*> cancel_all;
  // Ignores every enclosing scope: work that outlives the request that happened to start it
  // (an engine built for a new shape serves every later request of that shape).
  bool isolated = false;
};

namespace stop_internal {

struct Frame {
  StopCondition cond;
  const Frame* outer = nullptr;
};

inline thread_local const Frame* g_top = nullptr;

}  // namespace stop_internal

class StopScope {
 public:
  explicit StopScope(StopCondition c) : frame_{std::move(c), stop_internal::g_top} {
    stop_internal::g_top = &frame_;
  }
  ~StopScope() { stop_internal::g_top = frame_.outer; }
  StopScope(const StopScope&) = delete;
  StopScope& operator=(const StopScope&) = delete;

 private:
  stop_internal::Frame frame_;
};

// OK while no enclosing scope's flag is set and no deadline has passed.
inline absl::Status CheckStop() {
  const stop_internal::Frame* f = stop_internal::g_top;
  if (f == nullptr) return absl::OkStatus();
  const auto now = StopCondition::Clock::now();
  for (; f != nullptr; f = f->outer) {
    if (f->cond.cancel && f->cond.cancel->load(std::memory_order_relaxed)) {
      return absl::CancelledError(f->cond.what.empty() ? "stopped" : f->cond.what + " stopped");
    }
    if (!f->cond.cancel_all.empty() &&
        std::all_of(f->cond.cancel_all.begin(), f->cond.cancel_all.end(),
                    [](const std::atomic<bool>* c) { return c->load(std::memory_order_relaxed); })) {
      return absl::CancelledError((f->cond.what.empty() ? std::string("work") : f->cond.what) +
                                  " stopped: no client waits for it any more");
    }
    if (now >= f->cond.deadline) {
      return absl::DeadlineExceededError(
          (f->cond.what.empty() ? std::string("work") : f->cond.what) + " ran past its time limit");
    }
    if (f->cond.isolated) break;
  }
  return absl::OkStatus();
}

// Whether a status is a stop (the work was abandoned, not wrong): callers pass it on.
inline bool IsStopError(const absl::Status& s) {
  return s.code() == absl::StatusCode::kCancelled ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

// Whether any scope is open on this thread (loops that poll rarely may skip the clock read).
inline bool StopActive() { return stop_internal::g_top != nullptr; }

}  // namespace kiln
