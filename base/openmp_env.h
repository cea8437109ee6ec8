// OpenMP (oneDNN's threading in Debian's build) spins idle worker threads by default. On a
// machine whose cores are shared (a server's own gRPC threads, other processes) the spinning
// threads starve the ones doing work: measured here, ResNet-18 at batch 1 went from 17 ms to
// 300 ms under a parallel build. libgomp reads OMP_WAIT_POLICY once, when it is loaded, so
// setting it from main() is too late; instead the process re-executes itself once with the
// variable set. An explicit OMP_WAIT_POLICY in the environment is always respected.
#pragma once

#include <climits>
#include <cstdlib>
#include <unistd.h>

namespace kiln {

inline void EnsurePassiveOpenMpWait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  // Exec the binary's real path, not /proc/self/exe: the kernel names a process after the
  // file it executed, and "exe" would hide kilnd from ps, top and pkill.
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return;
  path[n] = '\0';
  execv(path, argv);
  // exec failed (no /proc): carry on with the default policy rather than not start at all.
}

}  // namespace kiln
