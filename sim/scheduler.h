// A discrete-event scheduler with a virtual clock and cooperative tasks (issue 13).
//
// The scheduler owns virtual time. Two kinds of things happen at virtual instants:
//   - events: callbacks scheduled with At(t, fn) / After(d, fn), run on the stack of
//     whoever called Run();
//   - tasks ("simulated processes", one per worker): ordinary blocking-style C++ code,
//     started with Spawn(), that suspends inside a blocking call (Sleep, Block,
//     Completion::Wait) and is resumed by the scheduler at the virtual instant its wake-up
//     event fires. While a task runs, virtual time does not move; only events move it.
//
// Order (the tie rule). Every scheduled item — an event, a task's start, a wake-up —
// gets a sequence number from one counter, in the order it was scheduled. Items run in
// increasing (virtual time, sequence number): at one instant, first scheduled, first run
// (FIFO). Since the scheduling order is itself the product of earlier items run in this
// order on one OS thread, a run is a pure function of its inputs: same seed, same trace.
// Nothing here reads the wall clock or depends on thread timing or addresses.
//
// Suspension mechanism: Boost.Context fibers (boost::context::fiber; Boost 1.74 from the
// Debian 12 package libboost-context-dev). Why this one:
//   - a task is ordinary C++ with its own stack, so the unchanged blocking WorkerRule code
//     (and the Eigen gradient inside it) can be suspended in the middle of a ParamClient
//     call; C++20 coroutines are stackless and would need every frame between the rule
//     and the suspension point rewritten as a coroutine;
//   - a switch is a few dozen instructions in user space (no system call): sim_bench
//     measures ~45 ns of overhead per switch at 16 tasks and ~540 ns at 1,024 (cache
//     misses on the resumed task's stack) on the development VM; a thread per worker
//     with a hand-off would pay two futex wake-ups (microseconds) per switch and a
//     kernel thread per worker;
//   - everything runs on the one OS thread that calls Run(), so there are no data races
//     and no locks, and the order is the scheduler's, never the OS's.
// Boost.Context is kept out of this header (the fibers live in scheduler.cc). Under
// AddressSanitizer the fibers switch with ucontext plus Boost's ASan annotations instead
// (sim/CMakeLists.txt), since ASan cannot follow the default switch.
//
// Stacks and memory. Each task gets a stack of SchedulerOptions::stack_bytes (default
// 512 KiB) from boost::context::protected_fixedsize_stack: mmap'd, with a guard page
// below it, so an overflow is a segmentation fault at the guard instead of silent
// corruption. (Each mapping is 64 KiB larger, so that stack tops can be staggered and
// the tasks' hot lines do not all compete for the same cache sets; see scheduler.cc.)
// The kernel backs only the pages a task touches: a task that sleeps in a loop costs
// 4–5 KiB of resident memory (measured by sim_bench); one that runs an Eigen GEMM
// touches up to EIGEN_STACK_ALLOCATION_LIMIT (128 KiB by default) of stack temporaries
// plus its frames — hence the 512 KiB default and the 256 KiB floor. Besides its stack,
// a task costs its bookkeeping (~150 bytes plus its std::function and name). 1,024 tasks
// therefore reserve 576 MiB of address space and use 5 MiB to ~150 MiB of RAM,
// depending on what they run. A spawn costs an mmap and an mprotect (~25 µs with the
// teardown on the development VM). Each stack is two memory mappings, so the Linux
// default vm.max_map_count (65530) allows about 30,000 live tasks.
//
// Exceptions. An exception that leaves a task's body ends that task; the scheduler
// stores it (std::exception_ptr), stops the run loop at once, and Run() rethrows the very
// same exception object on its caller (its type is kept, so an asgd::InputError still
// reaches the CLI as one line). failed_task() then names the task. The other tasks stay
// suspended where they were; Run() may be called again. An exception thrown by an event
// callback propagates out of Run() directly (callbacks run on the caller's stack).
//
// Destruction unwinds: destroying the Scheduler destroys every unfinished task's fiber,
// which throws Boost's forced-unwind exception at its suspension point so the task's
// destructors run. Task code must therefore not swallow unknown exceptions: a
// `catch (...)` in a task must rethrow.
//
// Thread safety: none. A Scheduler and everything it runs belong to one OS thread, and
// every call below must come from that thread (tasks run on it).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"

namespace asgd::sim {

using TaskId = int32_t;
inline constexpr TaskId kNoTask = -1;

// One dispatched item, for traces (determinism tests, debugging).
struct TraceEvent {
  Duration time{};
  uint64_t seq = 0;       // the tie-breaking sequence number
  TaskId task = kNoTask;  // the task resumed, or kNoTask for a callback event
};

struct SchedulerOptions {
  // Stack per task, bytes. Eigen code runs on these stacks (see the header comment).
  // Default 512 KiB; at least 256 KiB (kMinStackBytes). Rounded up to whole pages.
  std::size_t stack_bytes = 512 * 1024;

  static constexpr std::size_t kMinStackBytes = 256 * 1024;
  // Throws asgd::ConfigError naming `sim.stack_kib` when stack_bytes is below the floor.
  void Validate() const;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options = {});
  // Unwinds every unfinished task (see the header comment). REQUIRES: not called from a task.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // ---- Time and events --------------------------------------------------------------
  // The virtual time: the time of the item being run, or of the last one run.
  Duration Now() const { return now_; }
  // Runs fn at virtual time t (t < Now() is treated as Now()). Callable from anywhere on
  // the scheduler's thread, including tasks and other callbacks. fn must not block (it
  // is not a task); it may schedule, spawn, Wake and Stop.
  void At(Duration t, std::function<void()> fn);
  void After(Duration d, std::function<void()> fn) { At(now_ + d, std::move(fn)); }

  // ---- Tasks ------------------------------------------------------------------------
  // Creates a task that starts running body at virtual time `start` (default: Now()).
  // name is for messages and traces. Returns its id (0, 1, 2, ... in spawn order).
  TaskId Spawn(std::string name, std::function<void()> body);
  TaskId SpawnAt(Duration start, std::string name, std::function<void()> body);

  // The task being run, or kNoTask when called from outside any task.
  TaskId Current() const { return current_; }
  bool InTask() const { return current_ != kNoTask; }

  // REQUIRES: called from a task of this scheduler (else asgd::InvariantError).
  // Suspends the calling task for d of virtual time (d <= 0: yields, and resumes after
  // every item already scheduled for Now()).
  void Sleep(Duration d);
  // Suspends the calling task until some event or task calls Wake(Current()).
  void Block();
  // Makes a Block()ed task runnable at Now() (or at t, WakeAt). REQUIRES: task is
  // blocked in Block() and has no wake-up pending (else asgd::InvariantError).
  void Wake(TaskId task) { WakeAt(task, now_); }
  void WakeAt(TaskId task, Duration t);
  bool IsBlocked(TaskId task) const;
  bool IsFinished(TaskId task) const;
  const std::string& TaskName(TaskId task) const;

  // ---- The run loop -----------------------------------------------------------------
  // Runs items in (time, sequence) order until none are left, Stop() is called, or a task
  // throws (then rethrows it, see the header comment). REQUIRES: not called from a task
  // or a callback (not re-entrant).
  void Run() { RunUntil(Duration::max()); }
  // The same, but runs only items with time <= limit; afterwards Now() is limit unless
  // the loop was stopped earlier (or limit is Duration::max()).
  void RunUntil(Duration limit);
  // Asks the run loop to return once the current item is done. Items left stay queued.
  void Stop() { stop_ = true; }

  // Tasks that have not finished (blocked, sleeping or not yet started).
  int64_t unfinished_tasks() const { return num_tasks_ - finished_tasks_; }
  int64_t num_tasks() const { return num_tasks_; }
  // Items still queued.
  std::size_t pending_events() const { return heap_.size(); }
  // Items run so far, and of those, task resumptions (each one is a switch into a task
  // and back).
  uint64_t events_run() const { return events_run_; }
  uint64_t task_switches() const { return task_switches_; }
  // The task whose exception Run() last rethrew, or kNoTask.
  TaskId failed_task() const { return failed_task_; }

  // Called with every item as it is dispatched (before it runs). Empty: no tracing.
  void SetTraceObserver(std::function<void(const TraceEvent&)> observer) {
    observer_ = std::move(observer);
  }

  const SchedulerOptions& options() const { return options_; }

 private:
  struct Task;  // defined in scheduler.cc (holds the Boost fiber)
  struct Item {
    int64_t time;  // ns
    uint64_t seq;
    int32_t task;       // >= 0: resume this task
    uint32_t callback;  // task < 0: index into callbacks_
  };
  struct Later {
    bool operator()(const Item& a, const Item& b) const {
      return a.time != b.time ? a.time > b.time : a.seq > b.seq;
    }
  };

  void Push(Duration t, int32_t task, uint32_t callback);
  void ResumeTask(TaskId id);
  void SwitchOut();  // from the current task back to the run loop
  Task& CheckedTask(TaskId id, const char* what) const;

  SchedulerOptions options_;
  Duration now_{};
  uint64_t next_seq_ = 0;
  std::vector<Item> heap_;  // a binary heap ordered by Later
  std::vector<std::function<void()>> callbacks_;
  std::vector<uint32_t> free_callbacks_;
  std::vector<std::unique_ptr<Task>> tasks_;
  int64_t num_tasks_ = 0;
  int64_t finished_tasks_ = 0;
  TaskId current_ = kNoTask;
  bool running_ = false;
  bool stop_ = false;
  uint64_t events_run_ = 0;
  uint64_t task_switches_ = 0;
  TaskId failed_task_ = kNoTask;
  std::function<void(const TraceEvent&)> observer_;
};

// A countdown a task waits on: the primitive a request/reply call is built from.
//
//   Completion done(sched, shards);           // one reply per shard
//   for (int s = 0; s < shards; ++s)          // the request reaches shard s at t_s; its
//     sched.At(t_s, [&, s] {                  // reply reaches the worker at r_s
//       ... handle the request ...
//       sched.At(r_s, [&] { done.Done(); });
//     });
//   done.Wait();                               // the task resumes at max(r_s)
//
// Wait() suspends the calling task until Done() has been called `count` times (returns
// at once if it already has); the task is woken at the virtual instant of the last
// Done(). Done() may be called from callbacks or other tasks. One task waits at a time.
// Reset(count) rearms it for the next call.
class Completion {
 public:
  Completion(Scheduler& sched, int64_t count) : sched_(sched), remaining_(count) {}
  // REQUIRES: called from a task; no other task waiting.
  void Wait();
  // REQUIRES: fewer than `count` Done() calls so far.
  void Done();
  bool done() const { return remaining_ == 0; }
  // REQUIRES: no task waiting.
  void Reset(int64_t count);

 private:
  Scheduler& sched_;
  int64_t remaining_;
  TaskId waiter_ = kNoTask;
};

// core/clock.h's Clock on a scheduler's virtual time. Now() is the scheduler's Now().
// SleepFor(d): from a task, suspends it for d of virtual time (Scheduler::Sleep); from
// outside the run loop, runs the scheduler until Now() + d (RunUntil); from an event
// callback, throws asgd::InvariantError (a callback cannot block).
// Thread safety: as the Scheduler's (one thread), unlike core/'s clocks.
class VirtualClock final : public Clock {
 public:
  explicit VirtualClock(Scheduler& sched) : sched_(sched) {}
  Duration Now() const override { return sched_.Now(); }
  void SleepFor(Duration d) override;

 private:
  Scheduler& sched_;
};

}  // namespace asgd::sim
