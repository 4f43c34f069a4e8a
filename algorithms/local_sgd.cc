// local_sgd — H local steps, then a parameter average by allreduce (Stich 2019, "Local SGD
// converges fast and communicates little"; Lin et al. 2020, "Don't use large mini-batches,
// use local SGD"). H = algorithm.window.
//
// Start: θ_i ← broadcast of rank 0's θ_0. Step: g_i ← ∇L_{B_i}(θ_i);
// θ_i ← Step(θ_i, g_i, η·schedule(e)); after every H-th step θ_i ← allreduce-mean of the θ_j,
// so every round starts from the same point. The local optimizer's slots (momentum, Adam's
// moments) stay local and are not averaged, as in Lin et al.'s local momentum. With H = 1
// and plain SGD a round is mean_i(θ − η g_i) = θ − η·mean_i g_i: allreduce_sgd up to float
// reassociation. The runner stops and evaluates only at round boundaries (steps_per_round
// = H), where the workers hold the same parameters, so no partial round is dropped.
// Staleness: 0 by construction (every local step applies its own gradient to the
// parameters it was computed on); one staleness-0 row per worker per step.
#include "algorithms/builtin_strategies.h"
#include "algorithms/collective_worker.h"
#include "core/error.h"

namespace asgd::algorithms {
namespace {

class LocalSgdWorker final : public CollectiveWorker {
 public:
  explicit LocalSgdWorker(int64_t h) : h_(h) {}

  StepResult Step(WorkerEnv& env) override {
    StepResult r;
    r.loss = env.gradient(theta_, grad_);
    env.optimizer->Step(theta_, grad_, Rate(env));
    if (++steps_ % h_ == 0) {
      env.collective->Allreduce(theta_, collective::ReduceOp::kMean);
      r.pushes = 1;  // one communication round: the averaging
    }
    return r;
  }

 protected:
  void BindBuffers(collective::Collective& c) override {
    c.Bind(theta_, collective::ReduceOp::kMean);
  }

 private:
  int64_t h_;
  int64_t steps_ = 0;
};

int64_t Period(const StrategyOptions& o) {
  if (o.worker.window < 1) {
    throw ConfigError("algorithm.window", std::to_string(o.worker.window),
                      "at least 1 (local_sgd's H: local steps per average)");
  }
  return o.worker.window;
}

}  // namespace

Strategy LocalSgdStrategy() {
  Strategy s;
  s.name = "local_sgd";
  s.description =
      "local SGD: H = window local steps, then the workers' parameters averaged by "
      "allreduce (Stich 2019; Lin et al. 2020)";
  s.synchronous = true;
  s.family = Family::kGroup;
  s.keys = ReadKeys(kOptimizerKeys, {"algorithm.lr_decay", "algorithm.linear_scaling",
                                     "algorithm.warmup_epochs", "algorithm.window"});
  s.steps_per_round = Period;
  s.worker_rule = [](const StrategyOptions& o) -> std::unique_ptr<WorkerRule> {
    return std::make_unique<LocalSgdWorker>(Period(o));
  };
  return s;
}

}  // namespace asgd::algorithms
