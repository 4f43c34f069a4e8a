#include "sim/scheduler.h"

#include <algorithm>
#include <string>
#include <utility>

#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>

#include "core/check.h"
#include "core/error.h"
#include "sim/option_keys.h"

namespace asgd::sim {

namespace ctx = boost::context;

namespace {

// Stacks are mmap'd at page-aligned addresses, usually a fixed stride apart, so without
// an offset the hot top lines of every task's stack fall into the same cache sets and
// evict one another at each switch. Each stack's top is therefore lowered by a
// per-task multiple of 64 bytes below 64 KiB (65 lines per task id: 65 and 1024 are
// coprime, so 1,024 consecutive tasks get 1,024 different offsets).
class ColoredStack {
 public:
  static constexpr std::size_t kSpan = 64 * 1024;

  ColoredStack(std::size_t size, TaskId id)
      : inner_(size + kSpan), color_((static_cast<std::size_t>(id) * 65 * 64) % kSpan) {}

  ctx::stack_context allocate() {
    ctx::stack_context sctx = inner_.allocate();
    sctx.sp = static_cast<char*>(sctx.sp) - color_;
    sctx.size -= color_;
    return sctx;
  }
  void deallocate(ctx::stack_context& sctx) noexcept {
    sctx.sp = static_cast<char*>(sctx.sp) + color_;
    sctx.size += color_;
    inner_.deallocate(sctx);
  }

 private:
  ctx::protected_fixedsize_stack inner_;
  std::size_t color_;
};

}  // namespace

void SchedulerOptions::Validate() const {
  if (stack_bytes < kMinStackBytes) {
    throw ConfigError(std::string(keys::kStackKib), std::to_string(stack_bytes / 1024),
                      "at least " + std::to_string(kMinStackBytes / 1024) +
                          " (KiB per task; Eigen needs up to 128 KiB of stack temporaries)");
  }
}

struct Scheduler::Task {
  enum class State { kReady, kRunning, kSleeping, kBlocked, kFinished };

  std::string name;
  std::function<void()> body;
  ctx::fiber fiber;  // the task, while it is suspended
  ctx::fiber sink;   // the run loop, while the task runs
  State state = State::kReady;
  bool wake_pending = false;  // a resume item for this task is in the heap
  std::exception_ptr error;
};

Scheduler::Scheduler(SchedulerOptions options) : options_(options) { options_.Validate(); }

Scheduler::~Scheduler() {
  // Destroying a suspended fiber unwinds its stack (forced_unwind), so destructors in
  // the tasks run while the scheduler's members are still alive. Callbacks go after.
  for (auto& t : tasks_) {
    if (t->state == Task::State::kFinished) continue;
    current_ = static_cast<TaskId>(&t - tasks_.data());
    t->fiber = ctx::fiber();
    current_ = kNoTask;
  }
}

void Scheduler::Push(Duration t, int32_t task, uint32_t callback) {
  // Items in the past run now: virtual time never goes back.
  const int64_t when = std::max(t, now_).count();
  heap_.push_back(Item{when, next_seq_++, task, callback});
  std::push_heap(heap_.begin(), heap_.end(), Later{});
}

void Scheduler::At(Duration t, std::function<void()> fn) {
  uint32_t slot;
  if (!free_callbacks_.empty()) {
    slot = free_callbacks_.back();
    free_callbacks_.pop_back();
    callbacks_[slot] = std::move(fn);
  } else {
    slot = static_cast<uint32_t>(callbacks_.size());
    callbacks_.push_back(std::move(fn));
  }
  Push(t, -1, slot);
}

TaskId Scheduler::Spawn(std::string name, std::function<void()> body) {
  return SpawnAt(now_, std::move(name), std::move(body));
}

TaskId Scheduler::SpawnAt(Duration start, std::string name, std::function<void()> body) {
  ASGD_CHECK(tasks_.size() < static_cast<std::size_t>(std::numeric_limits<TaskId>::max()));
  const auto id = static_cast<TaskId>(tasks_.size());
  auto task = std::make_unique<Task>();
  task->name = std::move(name);
  task->body = std::move(body);
  Task* t = task.get();
  // The entry catches everything but Boost's forced_unwind (which must reach the fiber's
  // own entry frame for the stack to be released); the run loop rethrows what it caught.
  task->fiber = ctx::fiber(std::allocator_arg, ColoredStack(options_.stack_bytes, id),
                           [t](ctx::fiber&& sink) {
                             t->sink = std::move(sink);
                             try {
                               t->body();
                             } catch (const ctx::detail::forced_unwind&) {
                               throw;
                             } catch (...) {
                               t->error = std::current_exception();
                             }
                             t->state = Task::State::kFinished;
                             t->body = nullptr;
                             return std::move(t->sink);
                           });
  tasks_.push_back(std::move(task));
  ++num_tasks_;
  t->wake_pending = true;
  Push(start, id, 0);
  return id;
}

Scheduler::Task& Scheduler::CheckedTask(TaskId id, const char* what) const {
  ASGD_CHECK(id >= 0 && static_cast<std::size_t>(id) < tasks_.size(), "sim: ", what, ": no task ",
             id);
  return *tasks_[static_cast<std::size_t>(id)];
}

bool Scheduler::IsBlocked(TaskId task) const {
  const Task& t = CheckedTask(task, "IsBlocked");
  return t.state == Task::State::kBlocked && !t.wake_pending;
}

bool Scheduler::IsFinished(TaskId task) const {
  return CheckedTask(task, "IsFinished").state == Task::State::kFinished;
}

const std::string& Scheduler::TaskName(TaskId task) const {
  return CheckedTask(task, "TaskName").name;
}

void Scheduler::SwitchOut() {
  Task& t = *tasks_[static_cast<std::size_t>(current_)];
  t.sink = std::move(t.sink).resume();
  // Resumed by the run loop: ResumeTask set current_ and the state.
}

void Scheduler::Sleep(Duration d) {
  ASGD_CHECK(InTask(), "sim: Sleep called outside a task");
  Task& t = *tasks_[static_cast<std::size_t>(current_)];
  t.state = Task::State::kSleeping;
  t.wake_pending = true;
  Push(now_ + std::max(d, Duration::zero()), current_, 0);
  SwitchOut();
}

void Scheduler::Block() {
  ASGD_CHECK(InTask(), "sim: Block called outside a task");
  Task& t = *tasks_[static_cast<std::size_t>(current_)];
  t.state = Task::State::kBlocked;
  SwitchOut();
}

void Scheduler::WakeAt(TaskId task, Duration t) {
  Task& k = CheckedTask(task, "Wake");
  ASGD_CHECK(k.state == Task::State::kBlocked && !k.wake_pending, "sim: Wake of task '", k.name,
             "', which is not blocked in Block() or already has a wake-up pending");
  k.wake_pending = true;
  Push(t, task, 0);
}

void Scheduler::ResumeTask(TaskId id) {
  Task& t = *tasks_[static_cast<std::size_t>(id)];
  ASGD_CHECK(t.state != Task::State::kFinished && t.wake_pending);
  t.wake_pending = false;
  t.state = Task::State::kRunning;
  current_ = id;
  ++task_switches_;
  t.fiber = std::move(t.fiber).resume();
  current_ = kNoTask;
  if (t.state == Task::State::kFinished) ++finished_tasks_;
}

void Scheduler::RunUntil(Duration limit) {
  ASGD_CHECK(!running_ && !InTask(), "sim: Run is not re-entrant (called from a task or callback)");
  running_ = true;
  stop_ = false;
  failed_task_ = kNoTask;
  // Clears running_ however the loop ends, so Run may be called again after a throw.
  struct Reset {
    bool& running;
    ~Reset() { running = false; }
  } reset{running_};

  while (!stop_ && !heap_.empty() && heap_.front().time <= limit.count()) {
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    const Item item = heap_.back();
    heap_.pop_back();
    now_ = Duration(item.time);
    ++events_run_;
    if (observer_) observer_(TraceEvent{now_, item.seq, item.task >= 0 ? item.task : kNoTask});
    if (item.task >= 0) {
      ResumeTask(item.task);
      Task& t = *tasks_[static_cast<std::size_t>(item.task)];
      if (t.error) {
        failed_task_ = item.task;
        std::exception_ptr error = std::exchange(t.error, nullptr);
        std::rethrow_exception(error);
      }
    } else {
      // Moved out first: the callback may schedule others and reuse its own slot.
      std::function<void()> fn = std::move(callbacks_[item.callback]);
      callbacks_[item.callback] = nullptr;
      free_callbacks_.push_back(item.callback);
      fn();
    }
  }
  if (!stop_ && limit != Duration::max() && now_ < limit) now_ = limit;
}

void Completion::Wait() {
  ASGD_CHECK(sched_.InTask(), "sim: Completion::Wait called outside a task");
  ASGD_CHECK(waiter_ == kNoTask, "sim: two tasks wait on one Completion");
  if (remaining_ == 0) return;
  waiter_ = sched_.Current();
  sched_.Block();
  waiter_ = kNoTask;
}

void Completion::Done() {
  ASGD_CHECK_GT(remaining_, 0, "sim: Completion::Done called more often than its count");
  if (--remaining_ == 0 && waiter_ != kNoTask) sched_.Wake(waiter_);
}

void Completion::Reset(int64_t count) {
  ASGD_CHECK(waiter_ == kNoTask, "sim: Completion::Reset while a task waits");
  remaining_ = count;
}

void VirtualClock::SleepFor(Duration d) {
  if (sched_.InTask()) {
    sched_.Sleep(d);
    return;
  }
  sched_.RunUntil(sched_.Now() + std::max(d, Duration::zero()));
}

}  // namespace asgd::sim
