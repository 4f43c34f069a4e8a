// allreduce_sgd — synchronous data-parallel SGD by allreduce, the baseline every paper on
// asynchronous SGD is read against: Horovod's DistributedOptimizer (Sergeev & Del Balso
// 2018, "Horovod: fast and easy distributed deep learning in TensorFlow"), PyTorch DDP.
//
// Start: θ ← broadcast of rank 0's θ_0. Step: g_i ← ∇L_{B_i}(θ); ḡ ← allreduce-mean of
// the g_i (gloo's ring, ring_chunked or halving_doubling: collective.algorithm);
// θ ← Step(θ, ḡ, η·schedule(e)) with the local optimizer. Every worker applies the same ḡ
// (gloo's allgather phase hands every rank the same bits) with the same optimizer state,
// so the replicas stay identical and the run is sync_sgd with every worker in every round,
// without a server: k workers of batch b are one step of batch k·b. The linear scaling
// rule and gradual warmup (Goyal et al. 2017) are the schedule (algorithm.linear_scaling,
// warmup_epochs), with e counted from the steps every worker took (deterministic).
// Staleness: 0 by construction (each gradient is applied to the parameters it was computed
// on); the runner records one staleness-0 row per worker per step.
#include "algorithms/builtin_strategies.h"
#include "algorithms/collective_worker.h"

namespace asgd::algorithms {
namespace {

class AllreduceWorker final : public CollectiveWorker {
 public:
  StepResult Step(WorkerEnv& env) override {
    StepResult r;
    r.loss = env.gradient(theta_, grad_);
    env.collective->Allreduce(grad_, collective::ReduceOp::kMean);
    env.optimizer->Step(theta_, grad_, Rate(env));
    r.pushes = 1;  // one communication round: the allreduce
    return r;
  }

 protected:
  void BindBuffers(collective::Collective& c) override {
    c.Bind(grad_, collective::ReduceOp::kMean);
  }
};

}  // namespace

Strategy AllreduceSgdStrategy() {
  Strategy s;
  s.name = "allreduce_sgd";
  s.description =
      "synchronous SGD by allreduce: the mean gradient of every worker applied by "
      "every worker's optimizer (Horovod's DistributedOptimizer)";
  s.synchronous = true;
  s.collective = true;
  s.keys = ReadKeys(kOptimizerKeys,
                    {"algorithm.lr_decay", "algorithm.linear_scaling", "algorithm.warmup_epochs"});
  s.steps_per_round = [](const StrategyOptions&) -> int64_t { return 1; };
  s.worker_rule = [](const StrategyOptions&) -> std::unique_ptr<WorkerRule> {
    return std::make_unique<AllreduceWorker>();
  };
  return s;
}

}  // namespace asgd::algorithms
