// The real kilnd binary (path in $KILND) as a child process of a test: started with a config
// file, awaited on its HTTP /healthz, stopped with SIGTERM.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "tests/server/free_port.h"

namespace kiln::server {

class KilndProcess {
 public:
  KilndProcess() = default;
  KilndProcess(const KilndProcess&) = delete;
  KilndProcess& operator=(const KilndProcess&) = delete;
  ~KilndProcess() {
    if (running()) Stop();
  }

  // Forks and execs `kilnd --config CONFIG EXTRA...`; then waits (up to 5 s) for /healthz on
  // http_port, because a gRPC channel whose first connect fails backs off for seconds.
  void Start(const std::string& config, int http_port, const std::vector<std::string>& extra = {}) {
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<const char*> argv = {"kilnd", "--config", config.c_str()};
      for (const std::string& a : extra) argv.push_back(a.c_str());
      argv.push_back(nullptr);
      execv(std::getenv("KILND"), const_cast<char* const*>(argv.data()));
      _exit(127);
    }
    httplib::Client http("127.0.0.1", http_port);
    for (int i = 0; i < 500 && !http.Get("/healthz") && !Exited(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // SIGTERM and wait; the exit status (0 when it drained and stopped cleanly), -1 if killed.
  int Stop() {
    if (pid_ > 0) kill(pid_, SIGTERM);
    return Wait();
  }

  // kill -9 and wait: what a crash, the OOM killer or an impatient orchestrator does.
  void Kill() {
    if (pid_ > 0) kill(pid_, SIGKILL);
    Wait();
  }

  // Waits for the process to end on its own; its exit status.
  int Wait() {
    if (pid_ > 0) {
      int status = 0;
      waitpid(pid_, &status, 0);
      pid_ = -1;
      exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    return exit_status_;
  }

  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

 private:
  // True (and the status kept) when the child has already exited, e.g. on a bad config.
  bool Exited() {
    int status = 0;
    if (pid_ > 0 && waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      return true;
    }
    return false;
  }

  pid_t pid_ = -1;
  int exit_status_ = -1;
};

// kilnd's two ports, as StartOnFreePorts chose them.
struct Ports {
  int grpc = 0, http = 0;
};

// Starts `p` on two fresh ports; `write_config(ports)` writes the config for them and returns
// its path. A port FreePort handed out may be taken by a parallel test before kilnd binds it
// (kilnd then exits: "cannot listen"): a server that exits at once is started again on fresh
// ports, up to three times (one that cannot start for another reason still ends exited).
template <typename WriteConfig>
Ports StartOnFreePorts(KilndProcess& p, WriteConfig&& write_config,
                       const std::vector<std::string>& extra = {}) {
  Ports ports;
  for (int attempt = 0; attempt < 3; ++attempt) {
    ports.grpc = FreePort();
    do {
      ports.http = FreePort();
    } while (ports.http == ports.grpc);
    p.Start(write_config(ports), ports.http, extra);
    if (p.running()) break;
  }
  return ports;
}

}  // namespace kiln::server
