// How many intra-op threads an engine's runs on the calling thread may use, for a scope.
//
// Why: a model served by N instances runs N engines side by side, each on cores / N threads,
// so that they do not oversubscribe the machine. When a caller knows its run is the only one
// (a generation loop's iteration with a single step: one stream decoding, or one prompt
// read), the other instances' cores sit idle; an engine built able to use them all
// (BuildOptions::run_threads below its threads) takes them for the runs inside such a scope.
// Engines that cannot change their team per run (cpu: a oneDNN primitive partitions its work
// for the team it was created with) are built at the narrow team and ignore the scope's
// widening. A thread-local setting, as OpenMP's own team size is.
#pragma once

namespace kiln::runtime {

namespace run_width_detail {
inline thread_local int width = 0;
}  // namespace run_width_detail

// The calling thread's run width: 0 outside any scope (each engine runs at its default team).
inline int RunWidth() { return run_width_detail::width; }

class ScopedRunWidth {
 public:
  // Every engine's most (EngineInfo::max_threads).
  static constexpr int kWidest = 1 << 20;
  // threads >= 1; runs on this thread use min(threads, the engine's max_threads) until the
  // scope ends (the enclosing scope's width is restored then).
  explicit ScopedRunWidth(int threads) : previous_(run_width_detail::width) {
    run_width_detail::width = threads < 1 ? 1 : threads;
  }
  ~ScopedRunWidth() { run_width_detail::width = previous_; }
  ScopedRunWidth(const ScopedRunWidth&) = delete;
  ScopedRunWidth& operator=(const ScopedRunWidth&) = delete;

 private:
  int previous_;
};

}  // namespace kiln::runtime
