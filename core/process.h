// Child processes: `asgd launch` starts the roles of a run as processes, `asgd sweep` and
// `asgd suite` start runs in parallel. A child is started by fork + exec with its output
// (stdout and stderr together) on a pipe the parent reads line by line, and it is always
// ended by PID: Terminate sends SIGTERM, then SIGKILL after a grace period, and reaps it.
// With die_with_parent a child also gets SIGTERM from the kernel when the thread that
// started it exits (PR_SET_PDEATHSIG), so a killed parent leaves no child behind.
//
// Thread safety: a ChildProcess is used by one thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace asgd {

struct ChildOptions {
  // argv[0] is the program's path (no PATH search). Required.
  std::vector<std::string> argv;
  // "NAME=value" entries added to (or replacing in) this process's environment.
  std::vector<std::string> env;
  // Names removed from the child's environment.
  std::vector<std::string> unset_env;
  // Output: captured on a pipe (ReadLines), written to output_file (appending), or, if
  // neither, inherited from this process. Default: captured.
  bool capture_output = true;
  std::string output_file;
  // SIGTERM to the child when the parent's starting thread dies. Default true.
  bool die_with_parent = true;
  // The child's working directory; empty = this process's.
  std::string working_dir;
};

class ChildProcess {
 public:
  // Starts the child. Throws IoError if it cannot be started (e.g. argv[0] missing; the
  // exec failure is reported by the child through a pipe, so the error names it).
  static std::unique_ptr<ChildProcess> Start(ChildOptions options);
  // Terminates (see Terminate, grace 2 s) a child still running.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // The read end of the output pipe (non-blocking), or -1 when output is not captured or
  // has ended. For poll().
  int output_fd() const { return out_fd_; }

  // Reads what the child wrote so far and calls on_line for every complete line (without
  // the newline; a last line without one is delivered at end of output). Returns false
  // once the output has ended (the child closed it, usually by exiting).
  bool ReadLines(const std::function<void(std::string_view line)>& on_line);

  // The exit status once the child has exited (128 + signal number if a signal ended it),
  // without blocking.
  std::optional<int> Poll();
  // Waits up to timeout for the child to exit (draining nothing: read the output first
  // if the child may block writing it).
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // Sends sig if the child is still running.
  void Signal(int sig);
  // SIGTERM, then SIGKILL if it has not exited after grace; reaps it. Returns the exit
  // status.
  int Terminate(std::chrono::milliseconds grace);

  bool running() { return !Poll().has_value(); }

 private:
  ChildProcess() = default;

  pid_t pid_ = -1;
  int out_fd_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string partial_;  // a line still being written
};

// The path of the running executable (/proc/self/exe resolved), for starting the same
// program as a child.
std::string SelfExecutable();

}  // namespace asgd
