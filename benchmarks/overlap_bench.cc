// allreduce_sgd's step with the allreduce overlapping backward (collective.overlap) against
// the one-piece allreduce after it (issue 43): N workers (threads of this process) on
// 127.0.0.1, gloo over TCP, each computing the MNIST MLP's gradient (784-256-256-10, 269,322
// floats) on batches of 64 from MNIST-shaped synthetic data, with the real allreduce_sgd
// worker rule from the registry.
//
//   BM_Overlap/<algorithm>/workers:<N>/overlap:<0|1>/bucket_kib:<B>
//       One iteration is one step of every worker: its gradient, the allreduce-mean and
//       the optimizer's step. Timed by thread 0 from a barrier all workers pass before the
//       step to one they pass after it (the slowest worker's step). One untimed warm-up
//       step. overlap:0 ignores bucket_kib. halving_doubling (the default
//       collective.algorithm) with overlap off and on at three bucket sizes, and ring with
//       overlap off: the default before the per-call cost was fixed (collective/README.md,
//       "Per-call cost"), the baseline of issue 43's goal for the MLP.
//
// Counters: step_ms (also real_time, manual timing), samples_per_s (N x 64 / step time).
// Compare overlap:1 with overlap:0 at the same N, on a machine with a core per worker and
// one for the communication threads; with fewer cores the communication threads compete
// with backward for them.
//
//   overlap_bench --benchmark_format=csv > raw.csv
#include <barrier>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "algorithms/optimizer.h"
#include "algorithms/strategy.h"
#include "benchmarks/mlp_problem.h"
#include "benchmarks/rank_threads.h"
#include "collective/collective.h"
#include "datasets/sampler.h"

namespace {

namespace alg = ::asgd::algorithms;
namespace col = ::asgd::collective;
using Clock = std::chrono::steady_clock;

constexpr int64_t kBatch = 64;

void BM_Overlap(benchmark::State& state, col::Algorithm algorithm, int workers, bool overlap,
                int64_t bucket_kib) {
  const int64_t iterations = static_cast<int64_t>(state.max_iterations);
  const asgd::bench::MlpProblem& mlp = asgd::bench::Mlp();
  const int64_t n = mlp.model->layout().size();
  alg::StrategyOptions so;
  so.num_workers = workers;
  so.worker.learning_rate = 0.01;
  so.worker.overlap = overlap;
  so.worker.bucket_floats = bucket_kib * 1024 / static_cast<int64_t>(sizeof(float));
  std::vector<float> initial(static_cast<std::size_t>(n));
  mlp.model->Initialize(initial, 1);
  std::barrier sync_point(workers);
  std::vector<double> times;
  asgd::bench::RunRanks(workers, algorithm, [&](int w, col::Collective& c) {
    auto model = mlp.model->Clone();
    asgd::datasets::SamplerOptions sopt;
    sopt.batch_size = kBatch;
    sopt.seed = static_cast<uint64_t>(w);
    asgd::datasets::BatchSampler sampler(mlp.data.train, mlp.Part(w, workers), sopt);
    auto optimizer = alg::NewOptimizer(alg::OptimizerOptions{}, n);
    alg::WorkerEnv env;
    env.worker = w;
    env.num_workers = workers;
    env.optimizer = optimizer.get();
    env.options = so.worker;
    env.collective = &c;
    env.initial = initial;
    env.gradient = [&](std::span<const float> p, std::span<float> g) {
      return model->LossAndGradient(p, sampler.Next(), g);
    };
    env.reporting_gradient = [&](std::span<const float> p, std::span<float> g,
                                 asgd::GradientReady& ready) {
      return model->LossAndGradientReporting(p, sampler.Next(), g, ready);
    };
    // Destroyed at the end of this body, before the collective: its communication thread
    // ends first.
    auto rule = alg::FindStrategy("allreduce_sgd").worker_rule(so);
    (void)rule->Start(env);
    for (int64_t i = 0; i <= iterations; ++i) {  // step 0 is the warm-up
      sync_point.arrive_and_wait();
      const auto t0 = Clock::now();
      rule->Step(env);
      sync_point.arrive_and_wait();
      if (w == 0 && i > 0) {
        times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
    }
  });
  const double step = asgd::bench::ReplayTimes(state, times);
  state.counters["step_ms"] = step * 1e3;
  state.counters["samples_per_s"] = static_cast<double>(workers * kBatch) / step;
}

}  // namespace

// The iteration count must be known before the loop (the workers run it on their own
// threads, and the loop replays their timings), so each case is registered with its own.
int main(int argc, char** argv) {
  struct Case {
    col::Algorithm algorithm;
    bool overlap;
    int64_t bucket_kib;
  };
  const std::vector<Case> cases = {{col::Algorithm::kRing, false, 256},
                                   {col::Algorithm::kHalvingDoubling, false, 256},
                                   {col::Algorithm::kHalvingDoubling, true, 64},
                                   {col::Algorithm::kHalvingDoubling, true, 256},
                                   {col::Algorithm::kHalvingDoubling, true, 1024}};
  for (int workers : {2, 4}) {
    for (const Case& c : cases) {
      const std::string name = "BM_Overlap/" + std::string(col::AlgorithmName(c.algorithm)) +
                               "/workers:" + std::to_string(workers) +
                               "/overlap:" + std::to_string(c.overlap ? 1 : 0) +
                               "/bucket_kib:" + std::to_string(c.bucket_kib);
      benchmark::RegisterBenchmark(name.c_str(), BM_Overlap, c.algorithm, workers, c.overlap,
                                   c.bucket_kib)
          ->Iterations(100)
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
