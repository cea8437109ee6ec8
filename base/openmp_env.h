// How OpenMP (oneDNN's threading in Debian's build) waits between parallel regions.
//
// libgomp's default spins idle threads for a long time, and ACTIVE spins forever: on a machine
// whose cores are shared (the server's gRPC threads, other processes) the spinning threads
// starve the ones doing work (measured here: ResNet-18 b1 from 17 ms to 300 ms under a parallel
// build). PASSIVE alone goes to the other extreme: every parallel region wakes the sleeping
// team through a futex, measured at ~45 us per region on these virtual machines, i.e. about a
// millisecond per MobileNet-v2 inference (56 primitives). Kiln's default sits between: PASSIVE
// with GOMP_SPINCOUNT=1000, a spin of ~20 us that covers the gap between one kernel and the
// next, then sleep. Measured (2 threads, kiln bench p50): idle, MobileNet-v2 6.0 -> 3.45 ms
// and bert_tiny 0.075 -> 0.052 ms; with one CPU hog beside it, 7.4 -> 10.1 ms and 0.075 ->
// 0.17 ms. Machines whose cores are shared should set GOMP_SPINCOUNT=0.
//
// libgomp reads these variables once, when it is loaded, so setting them from main() is too
// late; the process re-executes itself once with them set. Either variable set explicitly in
// the environment is respected (then nothing is changed).
#pragma once

#include <climits>
#include <cstdlib>
#include <unistd.h>

namespace kiln {

inline constexpr const char kDefaultOmpWaitPolicy[] = "PASSIVE";
inline constexpr const char kDefaultGompSpinCount[] = "1000";

// Sets Kiln's default in this process's environment unless either variable is set; true when
// it changed something (the process must then re-execute for libgomp to see it).
inline bool SetOpenMpWaitPolicy() {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) {
    return false;
  }
  return setenv("OMP_WAIT_POLICY", kDefaultOmpWaitPolicy, 1) == 0 &&
         setenv("GOMP_SPINCOUNT", kDefaultGompSpinCount, 1) == 0;
}

// Re-executes this binary with the current environment; returns only if that fails (then
// the process carries on with the libraries' defaults rather than not start at all).
inline void ReexecSelf(char** argv) {
  // Exec the binary's real path, not /proc/self/exe: the kernel names a process after the
  // file it executed, and "exe" would hide kilnd from ps, top and pkill.
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return;
  path[n] = '\0';
  execv(path, argv);
}

inline void EnsureOpenMpWaitPolicy(char** argv) {
  if (SetOpenMpWaitPolicy()) ReexecSelf(argv);
}

}  // namespace kiln
