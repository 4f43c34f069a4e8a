// What the worker rules on a collective (allreduce_sgd, local_sgd, dpsgd) share: the
// worker's own parameters θ_i and gradient buffer, and the start from one broadcast
// (Horovod's broadcast_parameters: every worker begins at rank 0's θ_0, so replicas that
// apply identical updates stay identical). The broadcast is an allreduce (sum) of rank
// 0's θ_0 and the others' zeros, so it moves an allreduce's bytes (Start says why).
#pragma once

#include <vector>

#include "algorithms/strategy.h"
#include "collective/collective.h"
#include "core/check.h"

namespace asgd::algorithms {

class CollectiveWorker : public WorkerRule {
 public:
  // REQUIRES env.collective with rank = env.worker and size = env.num_workers, and
  // env.initial (the model's size). Throws collective::CollectiveError.
  ps::Status Start(WorkerEnv& env) override {
    ASGD_CHECK(env.collective != nullptr && !env.initial.empty(),
               "a collective strategy needs WorkerEnv::collective and initial");
    ASGD_CHECK_EQ(env.collective->rank(), env.worker, "collective rank");
    ASGD_CHECK_EQ(env.collective->size(), env.num_workers, "collective size");
    grad_.assign(env.initial.size(), 0.0f);
    // The broadcast as a sum in which every rank but 0 contributes zeros (exact: x + 0 is
    // x): after gloo's BroadcastOneToAll of a large vector, the root's TCP pairs keep a
    // send buffer the size of that vector, and the ring allreduces that follow stalled
    // about 40 ms per segment on loopback (measured: a 1 MiB allreduce at 4 ranks took
    // 9 ms without the broadcast before it, 650 ms with it).
    theta_.assign(env.initial.size(), 0.0f);
    if (env.collective->rank() == 0) theta_.assign(env.initial.begin(), env.initial.end());
    env.collective->Allreduce(theta_, collective::ReduceOp::kSum);
    BindBuffers(*env.collective);
    return ps::Status::Ok();
  }
  std::span<const float> local_params() const override { return theta_; }

 protected:
  // Binds (Collective::Bind) the vectors this strategy allreduces every round, so that
  // gloo's ring_chunked and halving_doubling run on them in place; every rank calls it at
  // the same point of Start. theta_ and grad_ keep their storage from here on.
  virtual void BindBuffers(collective::Collective& /*collective*/) {}

  // The local step's rate: η·schedule.
  static float Rate(const WorkerEnv& env) {
    return static_cast<float>(env.options.learning_rate * env.learning_rate_scale);
  }

  std::vector<float> theta_, grad_;
};

}  // namespace asgd::algorithms
