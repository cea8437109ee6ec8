// The lanes a generation loop runs the steps of one scheduler iteration on, side by side.
//
// Why: a decode step of a small decoder (8 rows of a hidden-256, 4-layer model) is ~60
// kernels of a few tens of microseconds each. Split over two OpenMP threads, each kernel pays
// a fork and a barrier that cost about what the split saves: at 16 streams kilnd made as many
// tokens per second on one thread as on two (bench/results/generate.md, Steps side by side).
// The iteration's steps are independent (each sequence is in one step, and a step writes
// only its own sequences' pages), so with the model's `instances` > 1 each instance's engines
// run on cores / instances threads and that many steps run at once, one per lane.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::server::generate {

class StepLanes {
 public:
  // `lanes` - 1 threads; the caller of Run is lane 0.
  explicit StepLanes(int lanes);
  ~StepLanes();
  StepLanes(const StepLanes&) = delete;
  StepLanes& operator=(const StepLanes&) = delete;

  int lanes() const { return static_cast<int>(threads_.size()) + 1; }
  // Runs job(i, lane) once for each i in [0, count), in order of i as lanes come free, and
  // returns when all have finished. With one lane (or one job) they run on the caller's
  // thread, one after the other; a single job of several lanes runs inside a widest
  // runtime::ScopedRunWidth (its engines may use the idle lanes' cores, run_width.h). The first
  // exception a job throws is rethrown here, after every other job has finished.
  void Run(size_t count, const std::function<void(size_t job, int lane)>& job);

 private:
  void Work(int lane);
  // Takes and runs jobs of the current Run until none is left (mu_ not held).
  void Drain(int lane);

  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t, int)>* job_ = nullptr;  // the current Run's; guarded by mu_
  size_t count_ = 0, next_ = 0, finished_ = 0;             // guarded by mu_
  uint64_t round_ = 0;                                     // guarded by mu_: a Run's number
  bool stopping_ = false;                                  // guarded by mu_
  std::exception_ptr error_;                               // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace kiln::server::generate
