// SIGINT and SIGTERM taken synchronously: a process that serves or coordinates blocks
// them in its main thread before starting any other thread (so every thread inherits the
// mask) and waits for them with a timeout in its loop, instead of being killed midway.
#pragma once

#include <chrono>

#include <pthread.h>
#include <signal.h>

namespace asgd::experiments {

// Blocks SIGINT and SIGTERM in this thread (and the threads it starts) for its lifetime,
// so that the serving loop can take them with sigtimedwait.
class BlockedStopSignals {
 public:
  BlockedStopSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~BlockedStopSignals() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  BlockedStopSignals(const BlockedStopSignals&) = delete;
  BlockedStopSignals& operator=(const BlockedStopSignals&) = delete;

  // The signal that arrived within timeout, or 0 (also serves as the loop's sleep).
  int Wait(std::chrono::milliseconds timeout) const {
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(timeout.count() / 1000);
    ts.tv_nsec = static_cast<long>((timeout.count() % 1000) * 1000000);
    const int sig = sigtimedwait(&set_, nullptr, &ts);
    return sig > 0 ? sig : 0;
  }

 private:
  sigset_t set_{};
  sigset_t old_{};
};

}  // namespace asgd::experiments
