// Milliseconds since a steady-clock time point: how load, build, tuning and compile report
// their timings.
#pragma once

#include <chrono>

namespace kiln {

inline double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace kiln
