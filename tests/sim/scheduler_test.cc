#include "sim/scheduler.h"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/rng.h"
#include "sim/delay_model.h"
#include "sim/network_model.h"

namespace asgd::sim {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

// Built with append: GCC 12 reports a false -Wrestrict on "w" + std::to_string(i).
std::string TaskLabel(int i) {
  std::string s = "w";
  s.append(std::to_string(i));
  return s;
}

TEST(Scheduler, EventsAtOneInstantRunInTheOrderTheyWereScheduled) {
  Scheduler sched;
  std::vector<std::string> order;
  // Scheduled out of time order; ties at 5 ms must keep their scheduling order.
  sched.At(milliseconds(5), [&] { order.push_back("a@5"); });
  sched.At(milliseconds(1), [&] { order.push_back("b@1"); });
  sched.At(milliseconds(5), [&] { order.push_back("c@5"); });
  sched.Spawn("t", [&] {
    order.push_back("t@0");
    sched.Sleep(milliseconds(5));  // scheduled after a and c: runs after them
    order.push_back("t@5");
  });
  sched.At(milliseconds(5), [&] {
    order.push_back("d@5");
    sched.After(Duration::zero(), [&] { order.push_back("e@5"); });  // after everything queued
  });
  sched.Run();
  EXPECT_EQ(order, (std::vector<std::string>{"t@0", "b@1", "a@5", "c@5", "d@5", "t@5", "e@5"}));
  EXPECT_EQ(sched.Now(), milliseconds(5));
  EXPECT_EQ(sched.unfinished_tasks(), 0);
}

TEST(Scheduler, ThousandTasksWakeInVirtualTimeOrder) {
  constexpr int kTasks = 1000;
  Scheduler sched;
  // Each task sleeps three times; durations collide often (ties broken by schedule order).
  std::vector<std::tuple<int64_t, int, int>> woke;  // (time ns, task, round)
  std::vector<int64_t> expected_end(kTasks);
  for (int i = 0; i < kTasks; ++i) {
    int64_t total = 0;
    for (int r = 0; r < 3; ++r) total += ((i * 7 + r * 13) % 50) * 1000;
    expected_end[static_cast<std::size_t>(i)] = total;
    sched.Spawn(TaskLabel(i), [&sched, &woke, i] {
      for (int r = 0; r < 3; ++r) {
        sched.Sleep(microseconds((i * 7 + r * 13) % 50));
        woke.emplace_back(sched.Now().count(), i, r);
      }
    });
  }
  sched.Run();
  ASSERT_EQ(woke.size(), 3u * kTasks);
  EXPECT_EQ(sched.unfinished_tasks(), 0);
  EXPECT_EQ(sched.task_switches(), 4u * kTasks);  // a start and three wake-ups each
  // Virtual time never goes back, and each task's last wake-up is at the sum of its sleeps.
  for (std::size_t k = 1; k < woke.size(); ++k) {
    ASSERT_LE(std::get<0>(woke[k - 1]), std::get<0>(woke[k])) << "at wake-up " << k;
  }
  for (const auto& [t, i, r] : woke) {
    if (r == 2) {
      EXPECT_EQ(t, expected_end[static_cast<std::size_t>(i)]) << "task " << i;
    }
  }
  // At one instant, wake-ups come in the order they were scheduled: for the first round
  // (all scheduled at time 0 in spawn order), by task id.
  std::vector<std::pair<int64_t, int>> first;
  for (const auto& [t, i, r] : woke) {
    if (r == 0) first.emplace_back(t, i);
  }
  EXPECT_TRUE(std::is_sorted(first.begin(), first.end()));
}

TEST(Scheduler, BlockAndWakeWithACompletion) {
  Scheduler sched;
  Completion replies(sched, 3);
  Duration resumed{};
  sched.Spawn("worker", [&] {
    // A "request" to three shards whose replies arrive at 2, 7 and 4 ms.
    for (int ms : {2, 7, 4}) sched.At(milliseconds(ms), [&] { replies.Done(); });
    replies.Wait();
    resumed = sched.Now();
    replies.Reset(1);
    sched.After(milliseconds(1), [&] { replies.Done(); });
    replies.Wait();
  });
  sched.Run();
  EXPECT_EQ(resumed, milliseconds(7));
  EXPECT_EQ(sched.Now(), milliseconds(8));
  EXPECT_EQ(sched.unfinished_tasks(), 0);
}

TEST(Scheduler, WakeOfATaskThatIsNotBlockedIsABug) {
  Scheduler sched;
  TaskId t = sched.Spawn("sleeper", [&] { sched.Sleep(milliseconds(1)); });
  EXPECT_THROW(sched.Wake(t), InvariantError);  // not started yet: a start is pending
  sched.Run();
  EXPECT_TRUE(sched.IsFinished(t));
  EXPECT_THROW(sched.Sleep(milliseconds(1)), InvariantError);  // not in a task
}

TEST(Scheduler, AnExceptionInATaskSurfacesOnTheRunCaller) {
  auto owner = std::make_unique<Scheduler>();
  Scheduler& sched = *owner;
  bool unwound = false;
  struct Guard {
    bool* flag;
    ~Guard() { *flag = true; }
  };
  sched.Spawn("blocked", [&] {
    Guard g{&unwound};
    sched.Block();  // nobody wakes it
  });
  TaskId bad = sched.Spawn("bad", [&] {
    sched.Sleep(milliseconds(3));
    throw ConfigError("delay.mean_ms", "-1", "> 0");
  });
  bool later_ran = false;
  sched.At(milliseconds(4), [&] { later_ran = true; });
  try {
    sched.Run();
    FAIL() << "Run returned normally";
  } catch (const ConfigError& e) {  // the type is kept
    EXPECT_EQ(e.key(), "delay.mean_ms");
  }
  EXPECT_EQ(sched.failed_task(), bad);
  EXPECT_EQ(sched.TaskName(bad), "bad");
  EXPECT_EQ(sched.Now(), milliseconds(3));  // the loop stopped at the throw
  EXPECT_TRUE(sched.IsFinished(bad));
  EXPECT_FALSE(later_ran);
  sched.Run();  // may go on
  EXPECT_TRUE(later_ran);
  EXPECT_EQ(sched.unfinished_tasks(), 1);
  EXPECT_TRUE(sched.IsBlocked(0));
  EXPECT_FALSE(unwound);
  owner.reset();  // destroying the scheduler unwinds the blocked task's stack
  EXPECT_TRUE(unwound);
}

TEST(Scheduler, AnExceptionInACallbackPropagatesFromRun) {
  Scheduler sched;
  int after = 0;
  sched.At(milliseconds(1), [] { throw std::runtime_error("callback failed"); });
  sched.At(milliseconds(2), [&] { ++after; });
  EXPECT_THROW(sched.Run(), std::runtime_error);
  EXPECT_EQ(sched.Now(), milliseconds(1));
  EXPECT_EQ(sched.failed_task(), kNoTask);
  sched.Run();
  EXPECT_EQ(after, 1);
}

TEST(Scheduler, DestructionUnwindsSuspendedTasks) {
  int destroyed = 0;
  struct Guard {
    int* n;
    ~Guard() { ++*n; }
  };
  {
    Scheduler sched;
    for (int i = 0; i < 10; ++i) {
      sched.Spawn("t", [&] {
        Guard g{&destroyed};
        sched.Block();
      });
    }
    sched.Spawn("never started", [&] { Guard g{&destroyed}; });
    sched.RunUntil(Duration::zero() - Duration(1));  // nothing runs: the starts are at 0
    EXPECT_EQ(sched.task_switches(), 0u);
    sched.Run();
    EXPECT_EQ(destroyed, 1);  // the one that ran to its end
    sched.Spawn("pending", [] {});
  }
  EXPECT_EQ(destroyed, 11);
}

TEST(Scheduler, StopAndRunUntil) {
  Scheduler sched;
  int ticks = 0;
  sched.Spawn("ticker", [&] {
    for (int i = 0; i < 100; ++i) {
      sched.Sleep(milliseconds(1));
      ++ticks;
      if (ticks == 10) sched.Stop();
    }
  });
  sched.Run();
  EXPECT_EQ(ticks, 10);
  EXPECT_EQ(sched.Now(), milliseconds(10));
  sched.RunUntil(milliseconds(25) + microseconds(500));
  EXPECT_EQ(ticks, 25);
  EXPECT_EQ(sched.Now(), milliseconds(25) + microseconds(500));
  VirtualClock clock(sched);
  clock.SleepFor(milliseconds(5));  // outside the loop: runs it for 5 ms
  EXPECT_EQ(ticks, 30);
  EXPECT_EQ(clock.Now(), milliseconds(30) + microseconds(500));
}

TEST(Scheduler, DefaultStackHoldsEigenSizedTemporaries) {
  // Eigen puts temporaries of up to EIGEN_STACK_ALLOCATION_LIMIT (128 KiB) on the stack;
  // a task must hold more than that across a suspension.
  Scheduler sched;
  uint64_t sum = 0;
  sched.Spawn("big frame", [&] {
    volatile unsigned char buffer[192 * 1024];
    for (std::size_t i = 0; i < sizeof(buffer); i += 64) buffer[i] = static_cast<unsigned char>(i);
    sched.Sleep(milliseconds(1));
    for (std::size_t i = 0; i < sizeof(buffer); i += 64) sum += buffer[i];
  });
  sched.Run();
  uint64_t expected = 0;
  for (std::size_t i = 0; i < 192 * 1024; i += 64) expected += static_cast<unsigned char>(i);
  EXPECT_EQ(sum, expected);
  SchedulerOptions small;
  small.stack_bytes = 64 * 1024;
  EXPECT_THROW(Scheduler{small}, ConfigError);
}

TEST(VirtualClock, SleepInATaskAdvancesVirtualTime) {
  Scheduler sched;
  VirtualClock clock(sched);
  Clock& c = clock;  // through the core interface, as WorkerEnv holds it
  std::vector<double> seen;
  sched.Spawn("a", [&] {
    c.SleepFor(milliseconds(250));
    seen.push_back(c.NowSeconds());
  });
  sched.At(milliseconds(1), [&] { EXPECT_THROW(c.SleepFor(milliseconds(1)), InvariantError); });
  sched.Run();
  EXPECT_EQ(seen, std::vector<double>{0.25});
}

// A small cluster-like workload: workers draw step times from a DelayModel, push to
// shards through a NetworkModel, and wait for the replies. Returns the full trace.
std::vector<std::tuple<int64_t, uint64_t, int>> RunWorkload(uint64_t seed) {
  constexpr int kWorkers = 40, kShards = 3, kSteps = 20;
  Scheduler sched;
  std::vector<std::tuple<int64_t, uint64_t, int>> trace;
  sched.SetTraceObserver(
      [&](const TraceEvent& e) { trace.emplace_back(e.time.count(), e.seq, e.task); });
  DelayOptions d;
  d.compute = ComputeKind::kLogNormal;
  d.mean = milliseconds(10);
  d.stddev = milliseconds(5);
  d.straggler_fraction = 0.1;
  d.straggler_factor = 3;
  d.pause_probability = 0.05;
  d.pause_length = milliseconds(30);
  DelayModel delays(d, kWorkers, seed);
  NetworkModel net(NetworkPreset("dc_10gbe"), kWorkers, kShards);
  for (int w = 0; w < kWorkers; ++w) {
    sched.Spawn(TaskLabel(w), [&, w] {
      Completion replies(sched, kShards);
      for (int step = 0; step < kSteps; ++step) {
        sched.Sleep(delays.StepTime(w));
        replies.Reset(kShards);
        for (int s = 0; s < kShards; ++s) {
          const Duration arrive = net.SendToShard(w, s, 400'000, sched.Now());
          sched.At(arrive, [&, s, w] {
            const Duration served = net.Serve(s, 400'000, sched.Now());
            sched.At(served, [&, s, w] {
              sched.At(net.SendToWorker(s, w, 400'000, sched.Now()), [&] { replies.Done(); });
            });
          });
        }
        replies.Wait();
      }
    });
  }
  sched.Run();
  EXPECT_EQ(sched.unfinished_tasks(), 0);
  return trace;
}

TEST(Scheduler, SameSeedGivesTheSameTrace) {
  const auto a = RunWorkload(7);
  const auto b = RunWorkload(7);
  const auto c = RunWorkload(8);
  ASSERT_GT(a.size(), 40u * 20u * 3u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);  // the seed does matter, so the comparison above can fail
}

}  // namespace
}  // namespace asgd::sim
