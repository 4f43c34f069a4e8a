// sync_sgd — synchronous SGD as TensorFlow's SyncReplicasOptimizer
// (docs/algorithms.md#sync_sgd).
//
// Worker: g ← ∇L_B(θ); push c_k·g as a push-pull that returns when the round is complete,
// with the new centre, and continue from it. c_k = η_k/η is the worker's weight when
// algorithm.worker_learning_rates gives it its own rate η_k (TFG's "different learning
// rates" variant), else 1. The worker keeps no optimizer state.
// Server (SyncRule with a ServerStep): a round takes exactly the first N fresh pushes
// (N = replicas_to_aggregate, default every worker), combines them in worker order —
// ḡ = (1/N)·Σ c_k·g_k (aggregation = mean, TensorFlow's) or Σ c_k·g_k (sum) — and applies
// the wrapped optimizer once: θ̃ ← Step(θ̃, ḡ, η·schedule(e)), e = rounds·N·B / training
// examples (the aggregated batches, as TF's schedules run on the global step). Momentum,
// Nesterov, Adagrad and Adam keep their slots on the shard, over the shard's elements;
// weight decay reads the shard's θ̃; checkpoints save the slots with the shard. With
// N < workers M, the pushes that arrive after the round closed were computed on an older
// version: they are dropped, counted and answered with the new centre (backup workers),
// and never reach the optimizer. Each shard runs its own rounds, as TF's per-variable
// accumulators do.
//
// With sgd, mean aggregation and every worker in every round, k workers of batch b are
// one step of batch k·b: θ̃ − η·mean_k g_k. The linear scaling rule and gradual warmup
// (Goyal et al. 2017) are the schedule (algorithm.linear_scaling, warmup_epochs).
// Staleness: 0 by construction; dropped pushes are what is recorded.
// Until this change the worker applied the optimizer locally and pushed its update: the
// same for sgd, but with backups a dropped gradient stayed in that worker's velocity, and
// Adagrad/Adam scaled by each worker's own statistics (docs/strategies.md, "sync_sgd").
//
// Compression (compression.name, issue 17): meaningful: the push is one gradient; a round
// aggregates the decoded pushes.
#include <algorithm>

#include "algorithms/builtin_strategies.h"
#include "algorithms/sync_rule.h"

namespace asgd::algorithms {

using ps::Status;
namespace {

class GradientPushWorker final : public WorkerRule {
 public:
  explicit GradientPushWorker(double base_rate) : base_rate_(base_rate) {}

  Status Start(WorkerEnv& env) override {
    const auto n = static_cast<std::size_t>(env.ps->size());
    theta_.assign(n, 0.0f);
    if (InPlace(env)) {
      std::vector<float>().swap(grad_);
    } else {
      grad_.assign(n, 0.0f);
    }
    steps_ = 0;
    return env.ps->Pull(theta_);
  }

  StepResult Step(WorkerEnv& env) override {
    StepResult r;
    // In place (the simulator, WorkerEnv): g goes to the shared scratch, then into θ, which
    // the push-pull's reply overwrites; the worker then owns θ alone. The same bits.
    const bool in_place = InPlace(env);
    const std::span<float> grad = in_place ? env.scratch_gradient : std::span<float>(grad_);
    r.loss = env.gradient(theta_, grad);
    // This worker's weight: its own rate over the base rate (1 unless
    // worker_learning_rates is set). The schedule is the server's.
    const auto weight = static_cast<float>(env.options.learning_rate / base_rate_);
    if (weight != 1.0f) {
      for (float& g : grad) g *= weight;
    }
    if (in_place) std::copy(grad.begin(), grad.end(), theta_.begin());
    r.status = env.ps->PushPull(in_place ? std::span<const float>(theta_) : grad, theta_,
                                ++steps_);
    r.pushes = 1;
    return r;
  }

  std::span<const float> local_params() const override { return theta_; }

 private:
  static bool InPlace(const WorkerEnv& env) {
    return env.push_pull_in_place && !env.scratch_gradient.empty();
  }

  double base_rate_;
  std::vector<float> theta_, grad_;
  int64_t steps_ = 0;
};

}  // namespace

Strategy SyncSgdStrategy() {
  Strategy s;
  s.name = "sync_sgd";
  s.supports_compression = true;
  s.description = "synchronous SGD: the optimizer applied on the server to the mean of the first "
                  "N fresh gradients per round (backup workers)";
  s.rounds = true;
  s.keys = ReadKeys(kOptimizerKeys | kScheduleKeys);
  s.settings = {ReplicasSetting(), AggregationSetting()};
  s.synchronous = true;
  s.worker_rule = [](const StrategyOptions& o) -> std::unique_ptr<WorkerRule> {
    return std::make_unique<GradientPushWorker>(o.worker.learning_rate);
  };
  s.server_rule = [](const StrategyOptions& o, uint32_t) -> std::unique_ptr<ps::ServerRule> {
    SyncRule::ServerStep step;
    step.optimizer = o.optimizer;
    step.learning_rate = o.worker.learning_rate;
    step.schedule = o.schedule;
    step.epochs_per_round = static_cast<double>(Replicas(o)) * o.epochs_per_batch;
    const SyncRule::Combine combine = SyncRule::FromAggregation(o.settings.String("aggregation"));
    return std::make_unique<SyncRule>(Replicas(o), combine, "sync_sgd", step);
  };
  return s;
}

}  // namespace asgd::algorithms
