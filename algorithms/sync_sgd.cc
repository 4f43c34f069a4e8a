// sync_sgd — synchronous SGD as TensorFlow's SyncReplicasOptimizer (algorithms.md §3.9).
//
// Worker: g ← ∇L_B(θ); u ← the local optimizer's update (−η_k·g for sgd; η_k is the
// worker's own rate when algorithm.worker_learning_rates is set: TFG's "different
// learning rates" variant); push u as a push-pull that returns when the round is
// complete, with the new centre. Server (SyncRule): a round applies exactly the first N
// fresh pushes (N = replicas_to_aggregate, default every worker): θ̃ ← θ̃ + (1/N)·Σ u_k
// (aggregation = mean, TensorFlow's) or θ̃ + Σ u_k (sum), summed in worker order, one
// version per round. With N < workers M the pushes that arrive after the round closed
// were computed on an older version: they are dropped, counted and answered with the new
// centre (backup workers; TF's accumulator drops them the same way). Each shard runs its
// own rounds, as TF's per-variable accumulators do.
//
// With sgd, mean aggregation and every worker in every round, k workers of batch b are
// one step of batch k·b: θ̃ − η·mean_k g_k. The worker applies the wrapped optimizer
// locally: for sgd, momentum and nesterov (linear in g) the mean of the workers' updates
// is the optimizer applied to the mean gradient, as TF applies it on the server; for
// adagrad and adam it is not (each worker scales by its own statistics).
// The linear scaling rule and gradual warmup (Goyal et al. 2017) are the learning-rate
// schedule (algorithm.linear_scaling, algorithm.warmup_epochs; schedule.h).
// Staleness: 0 by construction; dropped pushes are what is recorded.
#include "algorithms/builtin_strategies.h"
#include "algorithms/sync_rule.h"
#include "algorithms/windowed_worker.h"

namespace asgd::algorithms {

Strategy SyncSgdStrategy() {
  Strategy s;
  s.name = "sync_sgd";
  s.description = "synchronous SGD: mean of the first N fresh pushes per round (backup workers)";
  s.rounds = true;
  s.keys = ReadKeys(kOptimizerKeys | kScheduleKeys,
                    {"algorithm.replicas_to_aggregate", "algorithm.aggregation"});
  s.synchronous = true;
  s.worker_rule = [](const StrategyOptions&) -> std::unique_ptr<WorkerRule> {
    WindowedWorker::Mode mode;
    mode.single_step = true;
    return std::make_unique<WindowedWorker>(mode);
  };
  s.server_rule = [](const StrategyOptions& o, uint32_t) -> std::unique_ptr<transport::ServerRule> {
    return std::make_unique<SyncRule>(Replicas(o), SyncRule::FromAggregation(o.aggregation),
                                      "sync_sgd");
  };
  return s;
}

}  // namespace asgd::algorithms
