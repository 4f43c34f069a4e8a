// The simulator engine's own cost (issue 13 item 6): what the scheduler adds per event and
// per task switch, against a bare loop doing the same trivial work in the same binary.
//
// The trivial work of one "step" is kWorkRounds rounds of SplitMix64 on a local value
// (a few tens of ns), standing in for a gradient the scheduler does not care about.
//
// BM_SimTasks/tasks:<n>: n tasks (simulated workers) each run `steps` steps of
// {work; Sleep(d)}, d = 1–7 µs by task, so wake-ups interleave and tie; steps is chosen so
// every iteration dispatches about 2^16 events. Each event is one task switch (resume
// the task, run its step, switch back). The timed region is the whole simulation: the
// scheduler's construction, the n spawns (stack mmap), the run and the teardown.
// BM_SimEvents/pending:<n>: n self-rescheduling callbacks, no tasks: the event queue
// alone. In both, the same number of steps of the same work then runs in a plain loop
// in the same iteration. Counters:
//   ns_per_event       simulated time per dispatched event (the reported time / events)
//   overhead_ns        (simulated - bare) / events: what the engine adds per event
//   bare_ns_per_step   the bare loop's time per step
//   ratio              simulated time / bare time over the same iterations
//   ns_per_switch      BM_SimTasks: the run loop alone (no construction, spawns or
//                      teardown) per task switch, work included
//   spawn_us_per_task  BM_SimTasks: construction, spawn and teardown per task
//   rss_kib_per_task   BM_SimTasks: resident memory per task once every task has started
//                      and is suspended (the process's RSS growth / n, first iteration)
//
//   sim_bench --benchmark_min_time=0.5 --benchmark_repetitions=3
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include <benchmark/benchmark.h>
#include <unistd.h>

#include "core/rng.h"
#include "sim/scheduler.h"

namespace asgd::sim {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;

constexpr int kWorkRounds = 16;
constexpr int64_t kEventsPerIteration = 1 << 16;

inline uint64_t Work(uint64_t x) {
  for (int i = 0; i < kWorkRounds; ++i) x = SplitMix64(x);
  return x;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Resident set size of this process, KiB (from /proc/self/statm).
double RssKib() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long size = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1024
                : 0;
}

// A plain loop over the same steps: the baseline.
double BareSeconds(int64_t steps, uint64_t* sink) {
  const auto start = Clock::now();
  uint64_t x = *sink;
  for (int64_t i = 0; i < steps; ++i) {
    x = Work(x + static_cast<uint64_t>(i));
    benchmark::DoNotOptimize(x);
  }
  *sink = x;
  return Seconds(Clock::now() - start);
}

void Report(benchmark::State& state, double sim_s, double bare_s, double events, double steps) {
  state.counters["ns_per_event"] = sim_s / events * 1e9;
  state.counters["overhead_ns"] = (sim_s - bare_s) / events * 1e9;
  state.counters["bare_ns_per_step"] = bare_s / steps * 1e9;
  state.counters["ratio"] = sim_s / bare_s;
}

void BM_SimTasks(benchmark::State& state) {
  const int tasks = static_cast<int>(state.range(0));
  const int64_t steps = kEventsPerIteration / tasks;
  double sim_s = 0, bare_s = 0, events = 0, total_steps = 0, rss_per_task = 0;
  double run_s = 0;
  uint64_t sink = 1;
  bool first = true;
  for (auto _ : state) {
    const double rss_before = first ? RssKib() : 0;
    const auto start = Clock::now();
    uint64_t events_run = 0;
    Clock::duration run{};
    {
      Scheduler sched;
      for (int t = 0; t < tasks; ++t) {
        sched.Spawn("w", [&sched, &sink, t, steps] {
          uint64_t x = static_cast<uint64_t>(t);
          const auto d = microseconds(1 + t % 7);
          for (int64_t i = 0; i < steps; ++i) {
            x = Work(x + static_cast<uint64_t>(i));
            benchmark::DoNotOptimize(x);
            sched.Sleep(d);
          }
          sink += x;
        });
      }
      if (first) {
        // Runs after every task's start (scheduled before it), while all are suspended.
        sched.At(Duration::zero(), [&] { rss_per_task = (RssKib() - rss_before) / tasks; });
      }
      const auto run_start = Clock::now();
      sched.Run();
      run = Clock::now() - run_start;
      events_run = sched.task_switches();
    }
    const double elapsed = Seconds(Clock::now() - start);
    const double bare = BareSeconds(steps * tasks, &sink);
    state.SetIterationTime(elapsed);
    sim_s += elapsed;
    run_s += Seconds(run);
    bare_s += bare;
    events += static_cast<double>(events_run);
    total_steps += static_cast<double>(steps * tasks);
    first = false;
  }
  benchmark::DoNotOptimize(sink);
  Report(state, sim_s, bare_s, events, total_steps);
  state.counters["ns_per_switch"] = run_s / events * 1e9;
  state.counters["spawn_us_per_task"] =
      (sim_s - run_s) / (static_cast<double>(state.iterations()) * tasks) * 1e6;
  state.counters["rss_kib_per_task"] = rss_per_task;
  state.SetItemsProcessed(static_cast<int64_t>(total_steps));
}
BENCHMARK(BM_SimTasks)
    ->ArgName("tasks")
    ->Arg(16)
    ->Arg(256)
    ->Arg(1024)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

void BM_SimEvents(benchmark::State& state) {
  const int pending = static_cast<int>(state.range(0));
  const int64_t steps = kEventsPerIteration / pending;
  double sim_s = 0, bare_s = 0, events = 0, total_steps = 0;
  uint64_t sink = 1;
  for (auto _ : state) {
    const auto start = Clock::now();
    uint64_t events_run = 0;
    {
      Scheduler sched;
      struct Ticker {
        Scheduler* sched;
        uint64_t* sink;
        Duration d;
        int64_t left;
        uint64_t x;
        void operator()() {
          x = Work(x + static_cast<uint64_t>(left));
          benchmark::DoNotOptimize(x);
          if (--left > 0) {
            sched->After(d, *this);
          } else {
            *sink += x;
          }
        }
      };
      for (int t = 0; t < pending; ++t) {
        sched.At(Duration::zero(),
                 Ticker{&sched, &sink, microseconds(1 + t % 7), steps, static_cast<uint64_t>(t)});
      }
      sched.Run();
      events_run = sched.events_run();
    }
    const double elapsed = Seconds(Clock::now() - start);
    const double bare = BareSeconds(steps * pending, &sink);
    state.SetIterationTime(elapsed);
    sim_s += elapsed;
    bare_s += bare;
    events += static_cast<double>(events_run);
    total_steps += static_cast<double>(steps * pending);
  }
  benchmark::DoNotOptimize(sink);
  Report(state, sim_s, bare_s, events, total_steps);
  state.SetItemsProcessed(static_cast<int64_t>(total_steps));
}
BENCHMARK(BM_SimEvents)
    ->ArgName("pending")
    ->Arg(16)
    ->Arg(256)
    ->Arg(1024)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace asgd::sim

BENCHMARK_MAIN();
