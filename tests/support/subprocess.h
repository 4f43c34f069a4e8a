// Child processes for tests that run the `asgd` binary: started with posix_spawn, their
// output captured to a file, waited for with a timeout, and always ended by PID.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace asgd::testing {

class Subprocess {
 public:
  // Starts argv[0] (a path) with argv; `env` entries ("NAME=value") are added to this
  // process's environment. stdout and stderr go to output_path. Throws on failure.
  Subprocess(std::vector<std::string> argv, std::string output_path,
             std::vector<std::string> env = {});
  // Kills (SIGKILL) and reaps the process if it is still running.
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // The exit status once the process exited within timeout (128 + signal if killed by
  // one), or nullopt if it is still running.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // Sends sig to the process (if it is still running).
  void Signal(int sig);
  // What it wrote so far.
  std::string Output() const;

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string output_path_;
};

}  // namespace asgd::testing
