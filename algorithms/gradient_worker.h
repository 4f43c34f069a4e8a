// A worker that pushes raw mini-batch gradients and continues from the server's reply:
// for the strategies whose server applies the learning rate (dc_asgd, staleness_aware).
//   Start: θ ← pull.   Step: g ← ∇L_B(θ); θ ← push-pull(g).
// The local optimizer is not used; the server's rule is the optimizer.
#pragma once

#include <algorithm>
#include <vector>

#include "algorithms/strategy.h"

namespace asgd::algorithms {

class GradientWorker final : public WorkerRule {
 public:
  ps::Status Start(WorkerEnv& env) override {
    theta_.assign(static_cast<std::size_t>(env.ps->size()), 0.0f);
    if (InPlace(env)) {
      std::vector<float>().swap(grad_);
    } else {
      grad_.assign(theta_.size(), 0.0f);
    }
    steps_ = 0;
    return env.ps->Pull(theta_);
  }
  // In place (the simulator, WorkerEnv): g goes to the shared scratch, then into θ, which
  // the push-pull's reply overwrites; the worker then owns θ alone. The same bits.
  StepResult Step(WorkerEnv& env) override {
    StepResult r;
    if (InPlace(env)) {
      r.loss = env.gradient(theta_, env.scratch_gradient);
      std::copy(env.scratch_gradient.begin(), env.scratch_gradient.end(), theta_.begin());
      r.status = env.ps->PushPull(theta_, theta_, ++steps_);
    } else {
      r.loss = env.gradient(theta_, grad_);
      r.status = env.ps->PushPull(grad_, theta_, ++steps_);
    }
    r.pushes = 1;
    return r;
  }
  std::span<const float> local_params() const override { return theta_; }

 private:
  static bool InPlace(const WorkerEnv& env) {
    return env.push_pull_in_place && !env.scratch_gradient.empty();
  }

  std::vector<float> theta_, grad_;
  int64_t steps_ = 0;
};

}  // namespace asgd::algorithms
