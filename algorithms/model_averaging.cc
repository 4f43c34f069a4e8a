// model_averaging — periodic parameter averaging (Hermans' thesis §Model Averaging;
// dist-keras AveragingTrainer; docs/algorithms.md#model_averaging).
//
// Every worker runs W local optimizer steps from the centre, then pushes its parameters
// as a push-pull; the server (SyncRule, kMeanReplace) sets θ̃ to the mean of all n
// workers' parameters once every worker pushed (summed in worker order into a buffer that
// is fresh every round: dist-keras's buffer leaks across rounds) and every worker
// restarts from it. One worker is sequential training exactly.
//
// Compression (compression.name, issue 17): refused: the push is the worker's parameters, which
// the round averages; sparsifying or quantizing parameters would destroy them.
#include "algorithms/builtin_strategies.h"
#include "algorithms/sync_rule.h"

namespace asgd::algorithms {

using ps::Status;
namespace {

class AveragingWorker final : public WorkerRule {
 public:
  Status Start(WorkerEnv& env) override {
    theta_.assign(static_cast<std::size_t>(env.ps->size()), 0.0f);
    grad_.assign(theta_.size(), 0.0f);
    sent_.assign(theta_.size(), 0.0f);
    steps_ = 0;
    return env.ps->Pull(theta_);
  }
  StepResult Step(WorkerEnv& env) override {
    StepResult r;
    r.loss = env.gradient(theta_, grad_);
    env.optimizer->Step(theta_, grad_,
                        static_cast<float>(env.options.learning_rate * env.learning_rate_scale));
    if (++steps_ % env.options.window == 0) {
      sent_ = theta_;
      r.status = env.ps->PushPull(sent_, theta_, steps_);  // returns with the average
      r.pushes = 1;
    }
    return r;
  }
  std::span<const float> local_params() const override { return theta_; }

 private:
  std::vector<float> theta_, grad_, sent_;
  int64_t steps_ = 0;
};

}  // namespace

Strategy ModelAveragingStrategy() {
  Strategy s;
  s.name = "model_averaging";
  s.description = "periodic model averaging: every W steps the centre becomes the workers' mean";
  s.keys = ReadKeys(kOptimizerKeys | kScheduleKeys, {"algorithm.window"});
  s.synchronous = true;
  s.worker_rule = [](const StrategyOptions&) -> std::unique_ptr<WorkerRule> {
    return std::make_unique<AveragingWorker>();
  };
  s.server_rule = [](const StrategyOptions& o, uint32_t) -> std::unique_ptr<ps::ServerRule> {
    return std::make_unique<SyncRule>(o.num_workers, SyncRule::Combine::kMeanReplace,
                                      "model_averaging");
  };
  return s;
}

}  // namespace asgd::algorithms
