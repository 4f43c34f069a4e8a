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
//
// BM_SimMnistMlp/workers:<n>: the simulator connected to training — n simulated workers of
// async_sgd, each a task running the real worker rule against a SimParamClient of a
// SimStore (1 shard, the zero network, a constant 10 ms step time), computing the real
// gradient of the MNIST MLP (784-256-256-10) on batches of kMlpBatch from MNIST-shaped
// synthetic data (784 features, 10 classes; the data's values do not change the cost).
// Every iteration runs kMlpSteps gradient steps in all (the same number at every n), then
// the same number of bare LossAndGradient calls on batches of the same size, one model,
// in a plain loop. The timed region includes building the store, the n workers' models,
// optimizers, rules and tasks. `ratio` is simulated / bare: what the simulator (the
// scheduler, the store's pulls and pushes — two 1 MB copies a step — the rule's update,
// the per-worker set-up) adds to the gradients alone. The goal (issue 13): <= 1.2 at
// 1,024 workers. A second baseline runs the same steps of the rule with one worker
// against a MemoryStore, without the scheduler: `store_ns_per_step` and `store_ratio`
// (simulated / that) separate the store's and rule's own work per step, which a real run
// does too, from what simulating adds. (Memory per worker: docs/simulator.md,
// measured on the shipped 1,024-worker run.)
//
// BM_SimCollectiveMlp/workers:<n>/full_batch:<b>: the simulated collective (issue 33) — n
// simulated workers of allreduce_sgd, each a task running the real worker rule on a rank
// of a SimCollectiveGroup (ring, the dc_10gbe network, a constant 10 ms step time), with
// the replicas' one θ and optimizer (algorithms::SharedReplica, as the simulated runner
// gives allreduce_sgd), computing the same real MLP gradients as BM_SimMnistMlp,
// kMlpSteps in all; every step's gradient is allreduced over the n ranks in gloo's order
// (the full vector, 268,650 floats; the rank that applies the round reads the one result).
// full_batch:0 draws from the 8,192 examples of BM_SimMnistMlp, so at 256 and 1,024
// workers a worker's part is 32 and 8 examples and so are its batches; full_batch:1 gives
// every worker a part of kMlpBatch examples (a data set of n·kMlpBatch), so every batch is
// kMlpBatch at every n. steps_per_worker:0 runs kMlpSteps in all (4 a worker at 1,024, so
// each worker's set-up, its buffers' first use, is spread over 4 steps); k > 0 runs k a
// worker. `ratio` is simulated / the bare gradients, the baseline
// ("the same real gradients without the scheduler"; its goal: <= 1.1 at 1,024 workers):
// every worker's own batches (its part, sampler seed and batch size) through
// LossAndGradient on one model at the initial parameters, in a plain loop — no scheduler,
// no collective, no optimizer step, no replicas. The reduction itself is work a real run
// does too (each of N ranks adds and copies its share): `reduce_ns_per_step` times the same
// allreduces of n vectors without the scheduler (GlooOrderAllreduce directly, the start's
// and one per step, each writing its result into all n vectors), and `collective_ratio`
// is simulated / (bare gradients + those reductions): what simulating adds beyond them
// (the scheduler, the workers' set-up, the step once per round). `cpu_ratio` and
// `cpu_collective_ratio` are the same in this thread's CPU time (the whole benchmark runs
// in one thread), which a loaded machine disturbs less than wall time.
//
//   sim_bench --benchmark_min_time=0.5 --benchmark_repetitions=3
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>

#include <benchmark/benchmark.h>
#include <unistd.h>

#include "algorithms/memory_store.h"
#include "algorithms/optimizer.h"
#include "algorithms/strategy.h"
#include "benchmarks/mlp_problem.h"
#include "collective/collective.h"
#include "core/rng.h"
#include "datasets/sampler.h"
#include "ps/placement.h"
#include "sim/network_model.h"
#include "sim/scheduler.h"
#include "sim/sim_collective.h"
#include "sim/sim_store.h"

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

// This thread's CPU time, seconds.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

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

constexpr int64_t kMlpBatch = 64;
constexpr int64_t kMlpSteps = 4096;

using bench::Mlp;
using bench::MlpProblem;

void BM_SimMnistMlp(benchmark::State& state) {
  const int workers = static_cast<int>(state.range(0));
  const MlpProblem& mlp = Mlp();
  const int64_t n = mlp.model->layout().size();
  const int64_t steps_per_worker = kMlpSteps / workers;
  const algorithms::Strategy& strategy = algorithms::FindStrategy("async_sgd");
  algorithms::StrategyOptions so;
  so.num_workers = workers;
  so.worker.learning_rate = 0.01;
  std::vector<float> initial(static_cast<std::size_t>(n));
  mlp.model->Initialize(initial, 1);
  double sim_s = 0, bare_s = 0, store_s = 0, steps = 0;
  for (auto _ : state) {
    const auto start = Clock::now();
    {
      Scheduler sched;
      NetworkModel net(NetworkOptions{}, workers, 1);
      sim::SimStore store(&sched, &net, ps::Placement::FromRanges(n, {{Range{0, n}}}), initial,
                          [&](uint32_t s) { return strategy.server_rule(so, s); });
      std::vector<std::unique_ptr<sim::SimParamClient>> clients;
      for (int w = 0; w < workers; ++w) {
        clients.push_back(std::make_unique<sim::SimParamClient>(&store, static_cast<uint32_t>(w)));
        sched.Spawn("w", [&, w] {
          auto model = mlp.model->Clone();
          datasets::SamplerOptions sopt;
          sopt.batch_size = kMlpBatch;
          sopt.seed = static_cast<uint64_t>(w);
          datasets::BatchSampler sampler(mlp.data.train, mlp.Part(w, workers), sopt);
          algorithms::OptimizerOptions oo;
          auto optimizer = algorithms::NewOptimizer(oo, n);
          auto rule = strategy.worker_rule(so);
          algorithms::WorkerEnv env;
          env.worker = w;
          env.num_workers = workers;
          env.ps = clients[static_cast<std::size_t>(w)].get();
          env.optimizer = optimizer.get();
          env.options = so.worker;
          env.gradient = [&](std::span<const float> p, std::span<float> g) {
            const float loss = model->LossAndGradient(p, sampler.Next(), g);
            sched.Sleep(std::chrono::milliseconds(10));
            return loss;
          };
          if (!rule->Start(env).ok()) std::abort();
          for (int64_t i = 0; i < steps_per_worker; ++i) {
            if (!rule->Step(env).status.ok()) std::abort();
          }
        });
      }
      sched.Run();
    }
    const double elapsed = Seconds(Clock::now() - start);
    // The bare gradients: as many, of the same size, on one model.
    const auto bare_start = Clock::now();
    {
      auto model = mlp.model->Clone();
      datasets::SamplerOptions sopt;
      sopt.batch_size = kMlpBatch;
      datasets::BatchSampler sampler(mlp.data.train, mlp.Part(0, 1), sopt);
      std::vector<float> grad(static_cast<std::size_t>(n));
      float sink = 0;
      for (int64_t i = 0; i < steps_per_worker * workers; ++i) {
        sink += model->LossAndGradient(initial, sampler.Next(), grad);
      }
      benchmark::DoNotOptimize(sink);
    }
    const double bare = Seconds(Clock::now() - bare_start);
    // The same steps of the rule, one worker against a MemoryStore, no scheduler: the
    // store's and the rule's own work per step (pull, push, local update), which a real
    // run does too.
    const auto store_start = Clock::now();
    {
      algorithms::MemoryStore memory(initial, strategy.server_rule(so, 0));
      algorithms::MemoryClient client(&memory, 0);
      auto model = mlp.model->Clone();
      datasets::SamplerOptions sopt;
      sopt.batch_size = kMlpBatch;
      datasets::BatchSampler sampler(mlp.data.train, mlp.Part(0, 1), sopt);
      auto optimizer = algorithms::NewOptimizer(algorithms::OptimizerOptions{}, n);
      auto rule = strategy.worker_rule(so);
      algorithms::WorkerEnv env;
      env.ps = &client;
      env.optimizer = optimizer.get();
      env.options = so.worker;
      env.gradient = [&](std::span<const float> p, std::span<float> g) {
        return model->LossAndGradient(p, sampler.Next(), g);
      };
      if (!rule->Start(env).ok()) std::abort();
      for (int64_t i = 0; i < steps_per_worker * workers; ++i) {
        if (!rule->Step(env).status.ok()) std::abort();
      }
    }
    store_s += Seconds(Clock::now() - store_start);
    state.SetIterationTime(elapsed);
    sim_s += elapsed;
    bare_s += bare;
    steps += static_cast<double>(steps_per_worker * workers);
  }
  state.counters["bare_ns_per_step"] = bare_s / steps * 1e9;
  state.counters["overhead_ns"] = (sim_s - bare_s) / steps * 1e9;
  state.counters["ratio"] = sim_s / bare_s;
  state.counters["store_ns_per_step"] = store_s / steps * 1e9;
  state.counters["store_ratio"] = sim_s / store_s;
  state.SetItemsProcessed(static_cast<int64_t>(steps));
}
BENCHMARK(BM_SimMnistMlp)
    ->ArgName("workers")
    ->Arg(16)
    ->Arg(256)
    ->Arg(1024)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

void BM_SimCollectiveMlp(benchmark::State& state) {
  const int workers = static_cast<int>(state.range(0));
  const bool full_batch = state.range(1) != 0;
  const MlpProblem& mlp = full_batch ? Mlp(std::max<int64_t>(8192, workers * kMlpBatch)) : Mlp();
  const int64_t n = mlp.model->layout().size();
  const int64_t steps_per_worker = state.range(2) > 0 ? state.range(2) : kMlpSteps / workers;
  const algorithms::Strategy& strategy = algorithms::FindStrategy("allreduce_sgd");
  algorithms::StrategyOptions so;
  so.num_workers = workers;
  so.worker.learning_rate = 0.01;
  std::vector<float> initial(static_cast<std::size_t>(n));
  mlp.model->Initialize(initial, 1);
  double sim_s = 0, bare_s = 0, reduce_s = 0, steps = 0;
  double sim_cpu = 0, bare_cpu = 0, reduce_cpu = 0;
  for (auto _ : state) {
    const double cpu0 = ThreadCpuSeconds();
    const auto start = Clock::now();
    {
      Scheduler sched;
      SimCollectiveGroup group(&sched, NetworkPreset("dc_10gbe"), workers,
                               collective::Algorithm::kRing);
      // The replicas' one θ and optimizer, as the simulated runner gives allreduce_sgd.
      algorithms::SharedReplica replica;
      replica.optimizer = algorithms::NewOptimizer(algorithms::OptimizerOptions{}, n);
      // One model (its scratch) for all workers, as the simulated runner shares it: one
      // task runs at a time, and none yields inside a gradient.
      const auto model = mlp.model->Clone();
      for (int w = 0; w < workers; ++w) {
        sched.Spawn("w", [&, w] {
          datasets::SamplerOptions sopt;
          sopt.batch_size = kMlpBatch;
          sopt.seed = static_cast<uint64_t>(w);
          datasets::BatchSampler sampler(mlp.data.train, mlp.Part(w, workers), sopt);
          auto rule = strategy.worker_rule(so);
          const auto rank = group.Rank(w);
          algorithms::WorkerEnv env;
          env.worker = w;
          env.num_workers = workers;
          env.collective = rank.get();
          env.initial = initial;
          env.optimizer = replica.optimizer.get();
          env.shared_replica = &replica;
          env.options = so.worker;
          env.gradient = [&](std::span<const float> p, std::span<float> g) {
            const float loss = model->LossAndGradient(p, sampler.Next(), g);
            sched.Sleep(std::chrono::milliseconds(10));
            return loss;
          };
          if (!rule->Start(env).ok()) std::abort();
          for (int64_t i = 0; i < steps_per_worker; ++i) {
            if (!rule->Step(env).status.ok()) std::abort();
          }
        });
      }
      sched.Run();
    }
    const double elapsed = Seconds(Clock::now() - start);
    const double cpu1 = ThreadCpuSeconds();
    const auto bare_start = Clock::now();
    {
      // Each worker's own batches: without full_batch a worker's part holds 8,192 / n
      // examples, so at 256 and 1,024 workers its batches are 32 and 8, not kMlpBatch.
      auto model = mlp.model->Clone();
      std::vector<float> grad(static_cast<std::size_t>(n));
      float sink = 0;
      for (int w = 0; w < workers; ++w) {
        datasets::SamplerOptions sopt;
        sopt.batch_size = kMlpBatch;
        sopt.seed = static_cast<uint64_t>(w);
        datasets::BatchSampler sampler(mlp.data.train, mlp.Part(w, workers), sopt);
        for (int64_t i = 0; i < steps_per_worker; ++i) {
          sink += model->LossAndGradient(initial, sampler.Next(), grad);
        }
      }
      benchmark::DoNotOptimize(sink);
    }
    const double bare = Seconds(Clock::now() - bare_start);
    const double cpu2 = ThreadCpuSeconds();
    sim_cpu += cpu1 - cpu0;
    bare_cpu += cpu2 - cpu1;
    // The same allreduces without the scheduler: n vectors, the start's and one per step.
    {
      std::vector<std::vector<float>> vectors(static_cast<std::size_t>(workers), initial);
      std::vector<std::span<float>> spans(vectors.begin(), vectors.end());
      const auto reduce_start = Clock::now();
      const double cpu3 = ThreadCpuSeconds();
      for (int64_t i = 0; i <= steps_per_worker; ++i) {
        GlooOrderAllreduce(collective::Algorithm::kRing, spans, collective::ReduceOp::kSum);
      }
      reduce_cpu += ThreadCpuSeconds() - cpu3;
      reduce_s += Seconds(Clock::now() - reduce_start);
      benchmark::DoNotOptimize(vectors[0][0]);
    }
    state.SetIterationTime(elapsed);
    sim_s += elapsed;
    bare_s += bare;
    steps += static_cast<double>(steps_per_worker * workers);
  }
  state.counters["bare_ns_per_step"] = bare_s / steps * 1e9;
  state.counters["reduce_ns_per_step"] = reduce_s / steps * 1e9;
  state.counters["ratio"] = sim_s / bare_s;
  state.counters["collective_ratio"] = sim_s / (bare_s + reduce_s);
  // The same ratios in this thread's CPU time, which other processes on a loaded machine
  // disturb less than they disturb wall time.
  state.counters["cpu_ratio"] = sim_cpu / bare_cpu;
  state.counters["cpu_collective_ratio"] = sim_cpu / (bare_cpu + reduce_cpu);
  state.SetItemsProcessed(static_cast<int64_t>(steps));
}
BENCHMARK(BM_SimCollectiveMlp)
    ->ArgNames({"workers", "full_batch", "steps_per_worker"})
    ->Args({16, 0, 0})
    ->Args({256, 0, 0})
    ->Args({1024, 0, 0})
    ->Args({1024, 1, 0})
    ->Args({1024, 1, 16})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace
}  // namespace asgd::sim

BENCHMARK_MAIN();
