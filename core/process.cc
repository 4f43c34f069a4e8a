#include "core/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"

extern char** environ;

namespace asgd {
namespace {

int ExitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::vector<std::string> ChildEnvironment(const ChildOptions& o) {
  std::vector<std::string> env;
  auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  auto overridden = [&](const std::string& name) {
    for (const auto& e : o.env) {
      if (name_of(e) == name) return true;
    }
    for (const auto& u : o.unset_env) {
      if (u == name) return true;
    }
    return false;
  };
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    if (!overridden(name_of(entry))) env.push_back(std::move(entry));
  }
  for (const auto& e : o.env) env.push_back(e);
  return env;
}

}  // namespace

std::unique_ptr<ChildProcess> ChildProcess::Start(ChildOptions o) {
  if (o.argv.empty()) throw InvariantError("ChildProcess::Start without argv");
  // Everything the child needs is prepared before fork: after it, only async-signal-safe
  // calls are allowed in the child (this process may have other threads).
  std::vector<std::string> env_strings = ChildEnvironment(o);
  std::vector<char*> argv, envp;
  for (auto& a : o.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out_pipe[2] = {-1, -1};
  if (o.capture_output && ::pipe2(out_pipe, O_CLOEXEC) != 0) {
    throw IoError(std::string("cannot create a pipe for ") + o.argv[0] + ": " + std::strerror(errno));
  }
  int file_fd = -1;
  if (!o.capture_output && !o.output_file.empty()) {
    file_fd = ::open(o.output_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (file_fd < 0) {
      throw IoError("cannot open " + o.output_file + ": " + std::strerror(errno));
    }
  }
  // The child reports an exec failure (its errno) on this pipe, closed on a good exec.
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw IoError(std::string("cannot create a pipe: ") + std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], file_fd}) {
      if (fd >= 0) ::close(fd);
    }
    throw IoError(std::string("cannot start ") + o.argv[0] + ": " + std::strerror(e));
  }
  if (pid == 0) {
    // The child: async-signal-safe calls only.
    if (o.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(127);  // the parent is already gone
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);  // whatever the parent thread blocked
    ::signal(SIGPIPE, SIG_DFL);
    const int out = out_pipe[1] >= 0 ? out_pipe[1] : file_fd;
    if (out >= 0) {
      ::dup2(out, STDOUT_FILENO);
      ::dup2(out, STDERR_FILENO);
    }
    if (!o.working_dir.empty() && ::chdir(o.working_dir.c_str()) != 0) {
      const int e = errno;
      (void)!::write(err_pipe[1], &e, sizeof(e));
      ::_exit(127);
    }
    ::execve(argv[0], argv.data(), envp.data());
    const int e = errno;
    (void)!::write(err_pipe[1], &e, sizeof(e));
    ::_exit(127);
  }
  ::close(err_pipe[1]);
  if (out_pipe[1] >= 0) ::close(out_pipe[1]);
  if (file_fd >= 0) ::close(file_fd);
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(err_pipe[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  ::close(err_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof(child_errno))) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (out_pipe[0] >= 0) ::close(out_pipe[0]);
    throw IoError(std::string("cannot run ") + o.argv[0] + ": " + std::strerror(child_errno));
  }
  auto child = std::unique_ptr<ChildProcess>(new ChildProcess());
  child->pid_ = pid;
  child->out_fd_ = out_pipe[0];
  if (child->out_fd_ >= 0) {
    ::fcntl(child->out_fd_, F_SETFL, ::fcntl(child->out_fd_, F_GETFL) | O_NONBLOCK);
  }
  return child;
}

ChildProcess::~ChildProcess() {
  if (!reaped_) Terminate(std::chrono::milliseconds(2000));
  if (out_fd_ >= 0) ::close(out_fd_);
}

bool ChildProcess::ReadLines(const std::function<void(std::string_view)>& on_line) {
  if (out_fd_ < 0) return false;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(out_fd_, buf, sizeof(buf));
    if (n > 0) {
      partial_.append(buf, static_cast<std::size_t>(n));
      std::size_t start = 0, nl;
      while ((nl = partial_.find('\n', start)) != std::string::npos) {
        on_line(std::string_view(partial_).substr(start, nl - start));
        start = nl + 1;
      }
      partial_.erase(0, start);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    // End of output (n == 0) or an error: deliver the last partial line and close.
    if (!partial_.empty()) {
      on_line(partial_);
      partial_.clear();
    }
    ::close(out_fd_);
    out_fd_ = -1;
    return false;
  }
}

std::optional<int> ChildProcess::Poll() {
  if (reaped_) return ExitStatus(status_);
  const pid_t r = ::waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    return ExitStatus(status_);
  }
  return std::nullopt;
}

std::optional<int> ChildProcess::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto s = Poll()) return s;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void ChildProcess::Signal(int sig) {
  if (!reaped_ && !Poll()) ::kill(pid_, sig);
}

int ChildProcess::Terminate(std::chrono::milliseconds grace) {
  if (auto s = Poll()) return *s;
  ::kill(pid_, SIGTERM);
  if (auto s = Wait(grace)) return *s;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status_, 0);
  reaped_ = true;
  return ExitStatus(status_);
}

std::string SelfExecutable() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) throw IoError(std::string("cannot resolve /proc/self/exe: ") + std::strerror(errno));
  path[n] = '\0';
  return path;
}

}  // namespace asgd
