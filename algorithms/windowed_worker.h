// The worker loop shared by the window strategies (async_sgd, hogwild's dense path,
// downpour, agn, dynsgd, adag_distance, and the synchronous sync_sgd and sagn): local
// optimizer steps on a local copy, the applied updates accumulated
// exactly (Optimizer::Step's `applied`), a push every W steps, a fetch of the centre
// every n_fetch steps.
//
//   Start:  θ ← pull; a ← 0
//   Step:   g ← ∇L_B(θ); θ ← θ + u with u the local optimizer's update; a ← a + u;
//           after W steps:  push a·scale (scale 1 for DOWNPOUR/DynSGD, 1/W for AGN),
//                           a ← 0, and if the fetch is due at the same step, the push and
//                           the pull are one atomic push-pull (θ ← the centre after it);
//           after n_fetch steps (if not done with the push): θ ← pull.
//   Finish: a partial window is dropped (dist-keras semantics: every push covers exactly W
//           local steps, docs/algorithms.md#conventions-shared-by-the-strategies).
//
// The window check comes after the step, so the first push also covers W steps (unlike
// dist-keras's DOWNPOUR, whose first commit covers W − 1; docs/algorithms.md#downpour).
//
// With push_gradients (DOWNPOUR with a server-side optimizer, DistBelief/TFG form) the
// push is the sum of the window's raw gradients instead of the applied updates.
//
// Cost: the window's bookkeeping rides on the optimizer's pass over the vector
// (Optimizer::Accumulate): the first step of a window writes a, the last one scales it by
// 1/W, and a step followed by a fetch does not write θ (the fetch overwrites it); the
// roundings are those of the equations above, step by step. The step allocates nothing.
// After a Step whose store call failed, local_params() is unspecified (as with a sharded
// push-pull that only some shards answered); the runner calls Start again or stops.
//
// Memory (the simulator, WorkerEnv): with env.scratch_gradient the gradient lives in the
// shared buffer (it is consumed by the optimizer before any store call); with
// env.push_pull_in_place, W = n_fetch = 1 and no push_gradients (async_sgd) a is θ itself: each
// step's push is a push-pull whose reply overwrites θ, so the update is computed into θ and sent
// from there. The worker then owns θ alone (and its optimizer's slots); the bits are the same.
#pragma once

#include <vector>

#include "algorithms/strategy.h"

namespace asgd::algorithms {

class WindowedWorker : public WorkerRule {
 public:
  struct Mode {
    bool normalise = false;       // push a/W (AGN) instead of a
    bool push_gradients = false;  // push the window's summed raw gradients
    bool single_step = false;     // W = n_fetch = 1 whatever the options say (async_sgd)
    bool fetch_at_push = false;   // n_fetch = W whatever the options say: every push is a
                                  // push-pull (synchronous rounds answer with the centre)
  };
  explicit WindowedWorker(Mode mode) : mode_(mode) {}

  ps::Status Start(WorkerEnv& env) override;
  StepResult Step(WorkerEnv& env) override;
  std::span<const float> local_params() const override { return theta_; }

 private:
  int64_t window(const WorkerEnv& env) const { return mode_.single_step ? 1 : env.options.window; }
  int64_t fetch_window(const WorkerEnv& env) const {
    if (mode_.single_step) return 1;
    return mode_.fetch_at_push ? env.options.window : env.options.fetch_window;
  }

  // The update is computed into θ and pushed from there (see the header comment).
  bool accumulate_in_theta(const WorkerEnv& env) const {
    return env.push_pull_in_place && !mode_.push_gradients && window(env) == 1 &&
           fetch_window(env) == 1;
  }

  Mode mode_;
  std::vector<float> theta_, grad_, accum_;  // grad_, accum_: empty when not used
  int64_t in_window_ = 0;                    // local steps since the last push
  int64_t steps_ = 0;                        // local steps since Start
};

}  // namespace asgd::algorithms
