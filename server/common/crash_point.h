// Crash points for the chaos tests (kilnd --test-crash-at STEP, hidden from --help like
// --enable-test-faults): the process kills itself with SIGKILL on reaching the armed step, so
// a test can stop kilnd at every step of an upload and a build, deterministically, and check
// what a restart finds. Never armed in production; unarmed, a point costs one load.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <string>
#include <string_view>

namespace kiln::server {

namespace crash_internal {
inline const std::string* g_step = nullptr;  // set once, before any thread starts
}  // namespace crash_internal

inline void ArmCrashPoint(std::string step) {
  crash_internal::g_step = new std::string(std::move(step));  // lives for the process
}

inline void CrashPoint(std::string_view step) {
  if (crash_internal::g_step != nullptr && *crash_internal::g_step == step) {
    ::kill(::getpid(), SIGKILL);
  }
}

}  // namespace kiln::server
