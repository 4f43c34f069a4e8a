#include "algorithms/windowed_worker.h"

#include <algorithm>

#include "algorithms/optimizer.h"
#include "core/check.h"

namespace asgd::algorithms {

using ps::Status;

Status WindowedWorker::Start(WorkerEnv& env) {
  ASGD_CHECK(env.ps != nullptr && env.optimizer != nullptr && env.gradient, "incomplete env");
  ASGD_CHECK(env.options.window >= 1 && env.options.fetch_window >= 1, "windows must be >= 1");
  const auto n = static_cast<std::size_t>(env.ps->size());
  ASGD_CHECK(env.scratch_gradient.empty() || env.scratch_gradient.size() == n,
             "scratch gradient size");
  theta_.assign(n, 0.0f);
  if (env.scratch_gradient.empty()) {
    grad_.assign(n, 0.0f);
  } else {
    std::vector<float>().swap(grad_);
  }
  if (accumulate_in_theta(env)) {
    std::vector<float>().swap(accum_);
  } else {
    accum_.assign(n, 0.0f);
  }
  in_window_ = 0;
  steps_ = 0;
  return env.ps->Pull(theta_);
}

StepResult WindowedWorker::Step(WorkerEnv& env) {
  StepResult r;
  // The window's first gradient: its parameters are the oldest the push will hold, which
  // a fetch inside the window (n_fetch < W) makes older than the last pull.
  if (in_window_ == 0) env.ps->MarkWindowStart();
  const std::span<float> grad = env.scratch_gradient.empty() ? std::span<float>(grad_)
                                                             : env.scratch_gradient;
  const std::span<float> accum =
      accumulate_in_theta(env) ? std::span<float>(theta_) : std::span<float>(accum_);
  r.loss = env.gradient(theta_, grad);
  const auto lr = static_cast<float>(env.options.learning_rate * env.learning_rate_scale);
  const int64_t w = window(env);
  const bool first = in_window_ == 0;
  const bool push_due = in_window_ + 1 == w;
  const bool fetch_due = (steps_ + 1) % fetch_window(env) == 0;
  // Each pass over the vector costs about as much as the optimizer's own, so the window's
  // bookkeeping rides on the optimizer's pass: the first step assigns a (no zeroing), the
  // last scales it by 1/W (no pass of its own; the same roundings as one after it), and
  // when a fetch follows, θ ← θ + u is skipped: the pull (or push-pull) overwrites θ.
  Optimizer::Accumulate acc;
  acc.skip_params = fetch_due;
  if (mode_.push_gradients) {
    if (first) {
      std::copy(grad.begin(), grad.end(), accum.begin());
    } else {
      for (std::size_t i = 0; i < grad.size(); ++i) accum[i] += grad[i];
    }
  } else {
    acc.applied = accum;
    acc.assign = first;
    if (push_due && mode_.normalise) acc.scale = 1.0f / static_cast<float>(w);
  }
  env.optimizer->Step(theta_, grad, lr, acc);
  ++in_window_;
  ++steps_;
  if (push_due) {
    r.status = fetch_due ? env.ps->PushPull(accum, theta_, steps_) : env.ps->Push(accum, steps_);
    r.pushes = 1;
    in_window_ = 0;
  } else if (fetch_due) {
    r.status = env.ps->Pull(theta_);
  }
  return r;
}

}  // namespace asgd::algorithms
