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
// Simulated (WorkerEnv::shared_replica): the ranks' identical θ and optimizer are held once;
// each rank keeps only its gradient, reads the round's sum where the simulated group keeps
// it (Collective::AllreduceView), and the first rank to resume divides it by N and takes
// the step for all. The bits are the same: the same sum, the same division, the same step
// of the same optimizer state, once instead of N times.
// Overlap (collective.overlap, WorkerOptions::overlap): the allreduce-mean runs in buckets
// of collective.bucket_kib from the gradient's end, each started on a communication thread
// as soon as backward has produced it (collective/bucketed_allreduce.h; PyTorch DDP, Li et
// al. 2020), and the step waits for the last bucket. The same sum of the same gradients:
// ḡ agrees with the one-piece allreduce's within the rounding of the summation order
// (bit for bit at N <= 2), and every rank still applies the same bits.
#include <algorithm>
#include <memory>

#include "algorithms/builtin_strategies.h"
#include "algorithms/collective_worker.h"
#include "collective/bucketed_allreduce.h"

namespace asgd::algorithms {

using ps::Status;
namespace {

class AllreduceWorker final : public CollectiveWorker {
 public:
  Status Start(WorkerEnv& env) override {
    shared_ = env.shared_replica;
    if (shared_ == nullptr) {
      const Status started = CollectiveWorker::Start(env);
      // Every rank takes the same branch (one config), so the buckets' bindings match.
      if (env.options.overlap && env.reporting_gradient) {
        overlap_ = std::make_unique<collective::BucketedAllreduce>(
            *env.collective, grad_, env.options.bucket_floats, collective::ReduceOp::kMean);
      }
      return started;
    }
    ASGD_CHECK(env.collective != nullptr && !env.initial.empty() && shared_->optimizer,
               "a shared replica needs WorkerEnv::collective, initial and its optimizer");
    // The broadcast of the start (CollectiveWorker::Start): rank 0's θ_0 plus the others'
    // zeros, summed in this rank's gradient buffer; its one result is the replicas' θ.
    grad_.assign(env.initial.size(), 0.0f);
    if (env.collective->rank() == 0) grad_.assign(env.initial.begin(), env.initial.end());
    const std::span<const float> start = env.collective->AllreduceView(grad_);
    if (shared_->rounds < 0) {
      shared_->theta.assign(start.begin(), start.end());
      shared_->rounds = 0;
    }
    return Status::Ok();
  }

  StepResult Step(WorkerEnv& env) override {
    if (shared_ != nullptr) return SharedStep(env);
    StepResult r;
    if (overlap_ != nullptr) {
      overlap_->Start();
      r.loss = env.reporting_gradient(theta_, grad_, *overlap_);
      overlap_->Wait();
    } else {
      r.loss = env.gradient(theta_, grad_);
      env.collective->Allreduce(grad_, collective::ReduceOp::kMean);
    }
    env.optimizer->Step(theta_, grad_, Rate(env));
    r.pushes = 1;  // one communication round: the allreduce
    return r;
  }

  std::span<const float> local_params() const override {
    return shared_ != nullptr ? std::span<const float>(shared_->theta) : theta_;
  }

 protected:
  void BindBuffers(collective::Collective& c) override {
    c.Bind(grad_, collective::ReduceOp::kMean);
  }

 private:
  // Step with one θ for all ranks: Allreduce(kMean)'s sum and division (collective.cc),
  // then the optimizer's step, by the first rank of the round to get here.
  StepResult SharedStep(WorkerEnv& env) {
    StepResult r;
    r.loss = env.gradient(shared_->theta, grad_);
    const std::span<const float> sum = env.collective->AllreduceView(grad_);
    ++rounds_;
    if (shared_->rounds < rounds_) {
      shared_->mean.resize(sum.size());
      const int n = env.collective->size();
      if (n > 1) {
        const auto nf = static_cast<float>(n);
        for (std::size_t i = 0; i < sum.size(); ++i) shared_->mean[i] = sum[i] / nf;
      } else {
        std::copy(sum.begin(), sum.end(), shared_->mean.begin());
      }
      shared_->optimizer->Step(shared_->theta, shared_->mean, Rate(env));
      shared_->rounds = rounds_;
    }
    r.pushes = 1;
    return r;
  }

  SharedReplica* shared_ = nullptr;
  int64_t rounds_ = 0;  // this rank's rounds
  // With overlap: the bucketed allreduce of grad_ (its communication thread included).
  std::unique_ptr<collective::BucketedAllreduce> overlap_;
};

}  // namespace

Strategy AllreduceSgdStrategy() {
  Strategy s;
  s.name = "allreduce_sgd";
  s.description =
      "synchronous SGD by allreduce: the mean gradient of every worker applied by "
      "every worker's optimizer (Horovod's DistributedOptimizer)";
  s.synchronous = true;
  s.family = Family::kGroup;
  s.identical_replicas = true;
  s.keys = ReadKeys(kOptimizerKeys,
                    {"algorithm.lr_decay", "algorithm.linear_scaling", "algorithm.warmup_epochs"});
  s.steps_per_round = [](const StrategyOptions&) -> int64_t { return 1; };
  s.worker_rule = [](const StrategyOptions&) -> std::unique_ptr<WorkerRule> {
    return std::make_unique<AllreduceWorker>();
  };
  return s;
}

}  // namespace asgd::algorithms
