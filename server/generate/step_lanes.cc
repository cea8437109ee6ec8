#include "server/generate/step_lanes.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "runtime/run_width.h"

namespace kiln::server::generate {

StepLanes::StepLanes(int lanes) {
  for (int lane = 1; lane < std::max(lanes, 1); ++lane) {
    threads_.emplace_back([this, lane] { Work(lane); });
  }
}

StepLanes::~StepLanes() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void StepLanes::Run(size_t count, const std::function<void(size_t job, int lane)>& job) {
  if (threads_.empty() || count <= 1) {
    // A job alone leaves the other lanes' cores idle: its engine runs may take them.
    std::optional<runtime::ScopedRunWidth> wide;
    if (!threads_.empty()) wide.emplace(runtime::ScopedRunWidth::kWidest);
    for (size_t i = 0; i < count; ++i) job(i, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &job;
    count_ = count;
    next_ = finished_ = 0;
    error_ = nullptr;
    ++round_;
  }
  wake_.notify_all();
  Drain(0);
  std::unique_lock<std::mutex> lk(mu_);
  done_.wait(lk, [&] { return finished_ == count_; });
  job_ = nullptr;  // a lane waking late finds nothing to take
  if (std::exception_ptr e = std::exchange(error_, nullptr)) std::rethrow_exception(e);
}

void StepLanes::Drain(int lane) {
  std::unique_lock<std::mutex> lk(mu_);
  while (job_ && next_ < count_) {
    const size_t i = next_++;
    const std::function<void(size_t, int)>& job = *job_;
    lk.unlock();
    std::exception_ptr thrown;
    try {
      job(i, lane);
    } catch (...) {
      thrown = std::current_exception();
    }
    lk.lock();
    if (thrown && !error_) error_ = thrown;
    if (++finished_ == count_) done_.notify_all();
  }
}

void StepLanes::Work(int lane) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      wake_.wait(lk, [&] { return stopping_ || round_ != seen; });
      if (stopping_) return;
      seen = round_;
    }
    Drain(lane);
  }
}

}  // namespace kiln::server::generate
