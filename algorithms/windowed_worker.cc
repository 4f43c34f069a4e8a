#include "algorithms/windowed_worker.h"

#include <algorithm>

#include "algorithms/optimizer.h"
#include "core/check.h"

namespace asgd::algorithms {

Status WindowedWorker::Start(WorkerEnv& env) {
  ASGD_CHECK(env.ps != nullptr && env.optimizer != nullptr && env.gradient, "incomplete env");
  ASGD_CHECK(env.options.window >= 1 && env.options.fetch_window >= 1, "windows must be >= 1");
  const auto n = static_cast<std::size_t>(env.ps->size());
  theta_.assign(n, 0.0f);
  grad_.assign(n, 0.0f);
  accum_.assign(n, 0.0f);
  in_window_ = 0;
  steps_ = 0;
  return env.ps->Pull(theta_);
}

StepResult WindowedWorker::Step(WorkerEnv& env) {
  StepResult r;
  // The window's first gradient: its parameters are the oldest the push will hold, which
  // a fetch inside the window (n_fetch < W) makes older than the last pull.
  if (in_window_ == 0) env.ps->MarkWindowStart();
  r.loss = env.gradient(theta_, grad_);
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
      std::copy(grad_.begin(), grad_.end(), accum_.begin());
    } else {
      for (std::size_t i = 0; i < grad_.size(); ++i) accum_[i] += grad_[i];
    }
  } else {
    acc.applied = accum_;
    acc.assign = first;
    if (push_due && mode_.normalise) acc.scale = 1.0f / static_cast<float>(w);
  }
  env.optimizer->Step(theta_, grad_, lr, acc);
  ++in_window_;
  ++steps_;
  if (push_due) {
    r.status = fetch_due ? env.ps->PushPull(accum_, theta_, steps_) : env.ps->Push(accum_, steps_);
    r.pushes = 1;
    in_window_ = 0;
  } else if (fetch_due) {
    r.status = env.ps->Pull(theta_);
  }
  return r;
}

}  // namespace asgd::algorithms
