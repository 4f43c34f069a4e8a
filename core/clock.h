// Time, behind an interface.
//
// Workers, strategies and the runner read time only through a Clock, never from
// std::chrono directly, so tests and the (planned) virtual-time simulator can run the
// same code on a clock they control.
//
// Thread safety: every Clock implementation here is safe to call from many threads.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

namespace asgd {

using Duration = std::chrono::nanoseconds;

class Clock {
 public:
  virtual ~Clock() = default;
  // Time since this clock's origin (monotonic, never goes back).
  virtual Duration Now() const = 0;
  // Blocks (or, for a virtual clock, advances time) for at least d.
  virtual void SleepFor(Duration d) = 0;

  double NowSeconds() const { return std::chrono::duration<double>(Now()).count(); }
};

// The monotonic system clock (std::chrono::steady_clock); its origin is construction.
std::unique_ptr<Clock> NewSystemClock();

// A clock that moves only when told to. SleepFor advances it by d and returns at once.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(Duration start = Duration::zero()) : now_(start.count()) {}
  Duration Now() const override { return Duration(now_.load(std::memory_order_acquire)); }
  void SleepFor(Duration d) override { Advance(d); }
  void Advance(Duration d) { now_.fetch_add(d.count(), std::memory_order_acq_rel); }

 private:
  std::atomic<Duration::rep> now_;
};

// Measures elapsed time on a Clock.
class Stopwatch {
 public:
  explicit Stopwatch(const Clock& clock) : clock_(clock), start_(clock.Now()) {}
  Duration Elapsed() const { return clock_.Now() - start_; }
  double ElapsedSeconds() const { return std::chrono::duration<double>(Elapsed()).count(); }
  void Reset() { start_ = clock_.Now(); }

 private:
  const Clock& clock_;
  Duration start_;
};

// Wall-clock time for provenance records: ISO 8601 UTC, e.g. "2026-11-22T16:30:05Z".
std::string WallTimeIso8601();
// Compact UTC timestamp for folder names, e.g. "20261122-163005".
std::string WallTimeCompact();

}  // namespace asgd
