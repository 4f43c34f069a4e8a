// One synchronous round through the parameter server against one allreduce step: the
// communication the two synchronous baselines pay per step (issue 14, item 5). N workers
// (threads of this process) on 127.0.0.1, both over TCP:
//
//   BM_Round/<model>/workers:<N>
//       Each iteration runs, with the real worker rules from the registry and a gradient
//       that costs nothing (a constant: the model's compute is the same in both):
//       * sync_sgd: every worker's Step is one push-pull of its gradient to one shard server
//         (ZeroMQ over tcp://127.0.0.1) whose SyncRule waits for all N gradients, applies
//         the optimizer once to their mean and answers each worker with the new centre;
//       * allreduce_sgd: every worker's Step is one allreduce-mean of its gradient (gloo's
//         ring over TCP on 127.0.0.1) and the optimizer step on its own replica.
//       A phase is timed by thread 0 from a barrier all workers pass before it to one they
//       pass after it (the slowest worker's round). One untimed warm-up round each.
//   <model>: mlp (the MNIST MLP 784-256-256-10, 269,322 floats, 1.03 MiB) or 16mib
//   (4,194,304 floats).
//
// Counters:
//   ps_ms           time of one sync_sgd round, ms
//   allreduce_ms    time of one allreduce_sgd step, ms (also real_time, manual timing)
//   ps_vs_allreduce ps_ms / allreduce_ms over the same iterations (> 1: the allreduce is
//                   faster)
//   ps_bytes, allreduce_bytes  payload per worker per step: the push and the pull (2 x the
//                   vector) against the ring's 2(N-1)/N x the vector
//
//   round_bench --benchmark_format=csv > raw.csv
#include <algorithm>
#include <barrier>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "algorithms/optimizer.h"
#include "algorithms/strategy.h"
#include "benchmarks/rank_threads.h"
#include "collective/collective.h"
#include "core/param_layout.h"
#include "ps/placement.h"
#include "transport/context.h"
#include "transport/ps_client.h"
#include "transport/ps_param_client.h"
#include "transport/shard_server.h"

namespace {

namespace alg = ::asgd::algorithms;
namespace col = ::asgd::collective;
namespace ps = ::asgd::ps;
namespace tp = ::asgd::transport;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

void BM_Round(benchmark::State& state, int64_t count, int workers) {
  const int64_t iterations = static_cast<int64_t>(state.max_iterations);
  alg::StrategyOptions so;
  so.num_workers = workers;
  so.worker.learning_rate = 0.01;
  so.optimizer.name = "sgd";
  const std::vector<float> initial(static_cast<std::size_t>(count), 0.5f);

  // The parameter server: one shard with sync_sgd's rule over tcp.
  const alg::Strategy& sync = alg::FindStrategy("sync_sgd");
  auto context = tp::NewContext();
  asgd::ParamLayout layout;
  layout.Add("theta", {count});
  ps::PlacementOptions po;
  const ps::Placement placement = ps::Placement::Build(layout, 1, po);
  auto servers = tp::StartShardServers(
      context, placement, initial, [&](uint32_t s) { return sync.server_rule(so, s); },
      [](int) { return std::string("tcp://127.0.0.1:*"); }, tp::ServerOptions{});
  std::barrier sync_point(workers);
  std::vector<double> ps_times, allreduce_times;
  asgd::bench::RunRanks(
      workers, col::CollectiveOptions{}.algorithm, [&](int w, col::Collective& c) {
        tp::ClientOptions co;
        co.id = static_cast<uint32_t>(w);
        asgd::transport::PsParamClient client(
            std::make_unique<tp::PsClient>(context, tp::Endpoints(servers), placement, co));
        alg::OptimizerOptions oo;
        auto ps_optimizer = alg::NewOptimizer(oo, count);
        auto ar_optimizer = alg::NewOptimizer(oo, count);
        auto gradient = [](std::span<const float>, std::span<float> g) {
          std::fill(g.begin(), g.end(), 1e-6f);
          return 0.0f;
        };
        alg::WorkerEnv ps_env;
        ps_env.worker = w;
        ps_env.num_workers = workers;
        ps_env.ps = &client;
        ps_env.optimizer = ps_optimizer.get();
        ps_env.options = so.worker;
        ps_env.gradient = gradient;
        alg::WorkerEnv ar_env = ps_env;
        ar_env.ps = nullptr;
        ar_env.optimizer = ar_optimizer.get();
        ar_env.collective = &c;
        ar_env.initial = initial;
        auto ps_rule = sync.worker_rule(so);
        auto ar_rule = alg::FindStrategy("allreduce_sgd").worker_rule(so);
        if (!ps_rule->Start(ps_env).ok()) std::abort();
        (void)ar_rule->Start(ar_env);
        // Round 0 is the warm-up.
        for (int64_t i = 0; i <= iterations; ++i) {
          sync_point.arrive_and_wait();
          const auto t0 = Clock::now();
          if (!ps_rule->Step(ps_env).status.ok()) std::abort();
          sync_point.arrive_and_wait();
          const auto t1 = Clock::now();
          ar_rule->Step(ar_env);
          sync_point.arrive_and_wait();
          const auto t2 = Clock::now();
          if (w == 0 && i > 0) {
            ps_times.push_back(Seconds(t0, t1));
            allreduce_times.push_back(Seconds(t1, t2));
          }
        }
      });
  for (auto& server : servers) server->Close();

  const double allreduce_mean = asgd::bench::ReplayTimes(state, allreduce_times);
  double ps_total = 0;
  for (double t : ps_times) ps_total += t;
  const double ps_mean = ps_total / static_cast<double>(ps_times.size());
  const double vector = static_cast<double>(count) * sizeof(float);
  state.counters["ps_ms"] = ps_mean * 1e3;
  state.counters["allreduce_ms"] = allreduce_mean * 1e3;
  state.counters["ps_vs_allreduce"] = ps_mean / allreduce_mean;
  state.counters["ps_bytes"] = 2 * vector;
  state.counters["allreduce_bytes"] = 2.0 * (workers - 1) / workers * vector;
  state.counters["workers"] = workers;
}

}  // namespace

// The iteration count must be known before the loop (the workers run it on their own
// threads, and the loop replays their timings), so each case is registered with its own.
int main(int argc, char** argv) {
  struct Model {
    const char* name;
    int64_t count;
    int64_t iterations;
  };
  for (const Model& m : {Model{"mlp", 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10, 200},
                         Model{"16mib", 4 << 20, 20}}) {
    for (int workers : {2, 4}) {
      const std::string name =
          std::string("BM_Round/") + m.name + "/workers:" + std::to_string(workers);
      benchmark::RegisterBenchmark(name.c_str(), BM_Round, m.count, workers)
          ->Iterations(m.iterations)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
