// One generation request as its caller sees it: the tokens arrive here as the scheduler
// makes them, and the caller (a gRPC or HTTP handler) takes them at its own pace. The
// scheduler never waits on a caller: it appends and moves on; a caller that goes away
// cancels, and the scheduler frees the sequence's pages at its next step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"

namespace kiln::server::generate {

using Clock = std::chrono::steady_clock;

struct GeneratedToken {
  int64_t id = 0;
  double logprob = 0.0;  // filled when the request asked for log-probabilities
};

// What Take hands over: the tokens made since the last call and, once the request is over,
// how it ended.
struct StreamChunk {
  std::vector<GeneratedToken> tokens;
  bool done = false;
  absl::Status status;        // when done: OK, or why the request failed
  std::string finish_reason;  // when done and OK: "stop" (EOS or a stop sequence), "length"
  int64_t prompt_tokens = 0, generated_tokens = 0;  // when done
};

class GenerationStream {
 public:
  // Blocks until there are new tokens, the request is over, or `until`; returns what there
  // is (possibly nothing when `until` passed).
  StreamChunk Take(Clock::time_point until) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_until(lk, until, [&] { return !pending_.empty() || done_; });
    StreamChunk c;
    c.tokens.swap(pending_);
    if (done_) {
      c.done = true;
      c.status = status_;
      c.finish_reason = finish_reason_;
      c.prompt_tokens = prompt_tokens_;
      c.generated_tokens = generated_;
    }
    return c;
  }
  // Asks the scheduler to stop this request (the caller went away or gave up); its pages
  // are freed at the next step. The stream then ends CANCELLED.
  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  // The scheduler's side.
  void Push(const GeneratedToken& t) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      pending_.push_back(t);
      ++generated_;
    }
    cv_.notify_all();
  }
  void Finish(absl::Status status, std::string reason, int64_t prompt_tokens) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (done_) return;
      done_ = true;
      status_ = std::move(status);
      finish_reason_ = std::move(reason);
      prompt_tokens_ = prompt_tokens;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<GeneratedToken> pending_;  // guarded by mu_
  bool done_ = false;                    // guarded by mu_
  absl::Status status_;                  // guarded by mu_
  std::string finish_reason_;            // guarded by mu_
  int64_t prompt_tokens_ = 0, generated_ = 0;  // guarded by mu_
  std::atomic<bool> cancelled_{false};
};

}  // namespace kiln::server::generate
