// Local optimizers: the step a worker takes on its own copy of the parameters.
//
// Shared by the sequential baseline and by every strategy that takes local steps
// (DOWNPOUR, AGN, EASGD, ...). An optimizer owns its slots (velocity, accumulators,
// moments) for one parameter vector and is used by one thread.
//
// Update rules (g = gradient, η = the learning rate passed to Step, so schedules and
// per-worker rates need no new optimizer):
//   sgd       θ ← θ − η·g
//   momentum  v ← μ·v + g;          θ ← θ − η·v            (heavy ball, PyTorch form)
//   nesterov  v ← μ·v + g;          θ ← θ − η·(g + μ·v)    (Sutskever et al. 2013 in the
//             look-ahead reparametrisation used by PyTorch and Keras)
//   adagrad   a ← a + g²;           θ ← θ − η·g / (√a + ε), a starts at initial_accumulator
//             (TensorFlow's default 0.1; Duchi et al. 2011)
//   adam      m ← β1·m + (1−β1)·g;  s ← β2·s + (1−β2)·g²;
//             θ ← θ − η·m̂ / (√ŝ + ε) with bias corrections m̂ = m/(1−β1ᵗ), ŝ = s/(1−β2ᵗ)
//             (Kingma & Ba 2015, Algorithm 1)
// Weight decay, when non-zero, adds λ·θ to g before the rule (L2 regularisation).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace asgd::algorithms {

struct OptimizerOptions {
  // "sgd" | "momentum" | "nesterov" | "adagrad" | "adam". Default: sgd.
  std::string name = "sgd";
  // μ for momentum and nesterov, in [0, 1). Default 0.9.
  double momentum = 0.9;
  // Adam's β1, β2 in [0, 1) and ε > 0 (also Adagrad's ε). Defaults from Kingma & Ba.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  // Adagrad's initial accumulator value, >= 0. Default 0.1 as TensorFlow.
  double initial_accumulator = 0.1;
  // L2 coefficient λ >= 0 added to the gradient as λ·θ. Default 0.
  double weight_decay = 0.0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string Name() const = 0;

  // Applies one step with learning rate lr to params using grad. If applied is not
  // empty, the update actually added to params (θ_new − θ_old, computed exactly as it
  // was applied) is also added into applied, so strategies can accumulate their windows
  // without the rounding of a parameter difference.
  // REQUIRES: params.size() == grad.size() == size(); applied empty or of size().
  void Step(std::span<float> params, std::span<const float> grad, float lr,
            std::span<float> applied = {});

  // Where a step's update u goes besides params, for a window that accumulates its updates
  // without a pass of its own (windowed_worker.h). Element by element, in this order:
  //   applied ← u (assign) or applied + u (otherwise);  then applied ← applied · scale
  //   if scale != 1;  params ← params + u unless skip_params.
  // So a window's first step assigns instead of adding into zeros, and its last step
  // scales (AGN's 1/W) with the same roundings as a separate pass after the add would.
  struct Accumulate {
    // REQUIRES: of size(), not overlapping grad; not overlapping params either, unless
    // it is params itself with skip_params and assign (params are then read only for the
    // weight decay, in a pass before the update is written).
    std::span<float> applied;
    bool assign = false;
    float scale = 1.0f;
    // params are read (weight decay) but not written: for a caller that overwrites them
    // right after (a push-pull's reply). Slots (velocities, moments) advance as usual.
    bool skip_params = false;
  };
  // REQUIRES: params.size() == grad.size() == size().
  void Step(std::span<float> params, std::span<const float> grad, float lr,
            const Accumulate& accumulate);

  // Forgets all slot state (velocities, accumulators, step count).
  virtual void Reset() = 0;
  // Slot state as floats, for checkpoints; SetState restores it.
  virtual std::vector<float> State() const = 0;
  virtual void SetState(std::span<const float> state) = 0;

  // Accumulate as implementations see it (Apply): a raw pointer, null for none.
  struct Target {
    float* acc = nullptr;
    bool assign = false;
    float scale = 1.0f;
    bool write_params = true;
  };

  int64_t size() const { return size_; }
  int64_t steps() const { return steps_; }

 protected:
  explicit Optimizer(int64_t size, double weight_decay)
      : size_(size), weight_decay_(weight_decay) {}
  // The update computed from g (weight decay already folded in), written as `target` says
  // (Step's Accumulate contract). Implementations compute u per element and hand it to
  // ForEachUpdate (optimizer.cc), which holds one loop per target form.
  virtual void Apply(float* params, const float* g, float lr, const Target& target) = 0;

  int64_t size_;
  double weight_decay_;
  int64_t steps_ = 0;

 private:
  const float* Decayed(std::span<const float> params, std::span<const float> grad);

  std::vector<float> decayed_;  // scratch for g + λθ
};

// Throws ConfigError (keys "algorithm.optimizer", "algorithm.momentum", ...) for bad options.
std::unique_ptr<Optimizer> NewOptimizer(const OptimizerOptions& options, int64_t size);
std::vector<std::string> OptimizerNames();

}  // namespace asgd::algorithms
