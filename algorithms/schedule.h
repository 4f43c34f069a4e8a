// The learning-rate schedule every strategy's local steps follow: a per-epoch decay, and
// the linear scaling rule with gradual warmup of Goyal et al. 2017 ("Accurate, Large
// Minibatch SGD: Training ImageNet in 1 Hour";
// docs/algorithms.md#local-optimizers-and-the-rate-schedule).
//
//   rate(e) = η · warmup(e) · decay^⌊e⌋, e = epochs of data consumed so far (fractional)
//   warmup(e) = k                                     e ≥ warmup_epochs (or no warmup)
//             = 1 + (k − 1) · e / warmup_epochs       e < warmup_epochs
//
// k is the scaling factor (1 = no scaling); the linear scaling rule sets k to how many
// times larger the batch a step aggregates is than the reference batch (sync_sgd: the
// replicas aggregated per round). Warmup ramps linearly from η to k·η, per step, and is
// only meaningful with k > 1 (Goyal's "gradual warmup"; without scaling it is the
// identity).
#pragma once

namespace asgd::algorithms {

struct ScheduleOptions {
  // Multiply the rate by this after every whole epoch, in (0, 1]. Default 1 (constant).
  double decay = 1.0;
  // The linear-scaling factor k >= 1. Default 1.
  double scale = 1.0;
  // Epochs over which the rate ramps from η to k·η; 0 (default) = k·η from the start.
  double warmup_epochs = 0.0;
};

// The multiplier of the base rate η after `epochs` epochs (>= 0). Checks its options.
double LearningRateScale(const ScheduleOptions& options, double epochs);

}  // namespace asgd::algorithms
