// How glibc's heap treats multi-MiB buffers: returned to the OS at once while serving, kept
// for reuse while a model loads.
//
// Serving: kilnd maps every buffer of 1 MiB or more on its own (M_MMAP_THRESHOLD), so the
// multi-MiB request and upload chunks of the gRPC worker threads are unmapped when freed
// instead of staying in each worker's arena (RSS under a 512 MiB upload load: +55..103 MiB
// kept -> +28..41 MiB).
//
// Building a model: the reference interpreter of the warm-up check and the compiler allocate
// and free thousands of such buffers (a ViT-L/16's reference run: every activation widened to
// double, every product's output), and each mapping is faulted in and zeroed again: the two
// reference runs of ViT-L/16's check took 22-28 s that way against 13 s with the buffers
// reused. So a build (server/model/model_builder.cc; not the import, whose weight copies stay)
// widens the threshold to glibc's own ceiling (32 MiB) and keeps freed memory up to 64 MiB at
// the top of a heap, and when the last build ends puts the serving values back and hands what
// the build freed to the OS (malloc_trim).
//
// mallopt settings are process-wide: a request served while a model loads allocates as the
// load does (glibc's defaults, roughly), never worse.
#pragma once

#include <malloc.h>

#include <mutex>

namespace kiln {

inline constexpr int kServingMmapThreshold = 1 << 20;
inline constexpr int kServingTrimThreshold = 128 << 10;  // glibc's default
inline constexpr int kLoadMmapThreshold = 32 << 20;      // glibc's largest adaptive value
inline constexpr int kLoadTrimThreshold = 64 << 20;

// Called once at start by a serving process.
inline void SetServingHeap() {
  mallopt(M_MMAP_THRESHOLD, kServingMmapThreshold);
  mallopt(M_TRIM_THRESHOLD, kServingTrimThreshold);
}

// Holds the loading values while any scope is alive (scopes may nest or overlap across
// threads). Only for a process that called SetServingHeap: the end of the last scope sets
// the serving values.
class LoadHeapScope {
 public:
  LoadHeapScope() {
    std::lock_guard<std::mutex> lk(Mu());
    if (Count()++ == 0) {
      mallopt(M_MMAP_THRESHOLD, kLoadMmapThreshold);
      mallopt(M_TRIM_THRESHOLD, kLoadTrimThreshold);
    }
  }
  ~LoadHeapScope() {
    std::lock_guard<std::mutex> lk(Mu());
    if (--Count() == 0) {
      SetServingHeap();
      malloc_trim(0);
    }
  }
  LoadHeapScope(const LoadHeapScope&) = delete;
  LoadHeapScope& operator=(const LoadHeapScope&) = delete;

 private:
  static std::mutex& Mu() {
    static std::mutex mu;
    return mu;
  }
  static int& Count() {
    static int count = 0;
    return count;
  }
};

}  // namespace kiln
