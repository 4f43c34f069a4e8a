// How long a worker's step takes: the compute-time model, heterogeneity, stragglers and
// transient pauses (issue 13 item 2). One model for both worlds: the simulator adds
// StepTime() to the virtual clock; a real run can sleep ExtraDelay() after each step.
//
// A step's time for worker w, step k:
//
//   base  = measured * measured_scale              (kind = measured; measured is the real
//                                                   CPU time of the gradient, given by
//                                                   the caller, see ThreadCpuTime())
//         | mean                                    (constant)
//         | a draw from the distribution            (normal, lognormal, exponential, pareto)
//   time  = base * Factor(w) + (pause ? pause_length : 0)
//   Factor(w) = (straggler(w) ? straggler_factor : 1) / speeds[w mod speeds.size()]
//
// Distributions (all parameterised by the mean of the step time, so switching the kind
// keeps the mean):
//   normal      mean, stddev; truncated at 0 (negative draws are redrawn, so the mean is
//               slightly above `mean` when stddev is not small beside it)
//   lognormal   mean and stddev of the time itself: sigma^2 = ln(1 + stddev^2/mean^2),
//               mu = ln(mean) - sigma^2/2
//   exponential mean (stddev = mean)
//   pareto      mean and shape alpha > 1 (a finite mean); scale x_m = mean (alpha-1)/alpha;
//               the variance is finite only for alpha > 2. Heavy tails: alpha in (1, 2].
//
// Stragglers are persistent: exactly round(straggler_fraction * workers) workers (halves
// round up), chosen by a seeded shuffle (DeriveSeed(seed, "sim.stragglers")). Pauses are
// transient: each step independently pauses with pause_probability, for pause_length.
//
// Determinism: every draw comes from a generator of the worker's own
// (DeriveSeed(seed, "sim.compute", w) and DeriveSeed(seed, "sim.pause", w)), so worker
// w's k-th step time depends only on (options, seed, w, k, the measured time) — never on
// the order in which the scheduler interleaves workers. The draws use the C library's
// log, exp and pow and are rounded to whole nanoseconds, so two machines agree whenever
// their libm does to within that. (glibc picks FMA or non-FMA variants of these by CPU;
// were they to differ in a last bit, a ~10 ms step time would cross a nanosecond
// boundary about once in 10^9 draws.)
//
// Thread safety: calls for different workers may run concurrently (each worker's state
// is its own); calls for one worker must not.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/rng.h"

namespace asgd::sim {

enum class ComputeKind { kMeasured, kConstant, kNormal, kLogNormal, kExponential, kPareto };

// "measured", "constant", "normal", "lognormal", "exponential", "pareto".
std::string_view ComputeKindName(ComputeKind kind);
// The inverse; throws asgd::ConfigError naming `key` for an unknown name.
ComputeKind ParseComputeKind(std::string_view name, std::string_view key = "delay.compute");

struct DelayOptions {
  // How the base step time is obtained. Default: measured.
  ComputeKind compute = ComputeKind::kMeasured;
  // measured: multiplies the measured CPU time (e.g. 0.5 = a machine twice as fast as
  // this one). Default 1. > 0.
  double measured_scale = 1.0;
  // constant and distributions: the mean step time. Default 10 ms. > 0.
  Duration mean = std::chrono::milliseconds(10);
  // normal, lognormal: the standard deviation of the step time. Default 0. >= 0.
  Duration stddev{};
  // pareto: the shape alpha. Default 3. > 1 (a finite mean).
  double pareto_shape = 3.0;

  // Per-worker speeds (higher is faster: a worker with speed 4 takes a quarter of the
  // time), applied cyclically: worker w has speeds[w mod size]. Default {1}. Each > 0.
  std::vector<double> speeds = {1.0};
  // Fraction of workers that are stragglers, in [0, 1]. Default 0.
  double straggler_fraction = 0.0;
  // How many times slower a straggler is. Default 1 (no effect). >= 1.
  double straggler_factor = 1.0;
  // Probability that a step is followed by a pause, in [0, 1]. Default 0.
  double pause_probability = 0.0;
  // Length of a pause. Default 0. >= 0.
  Duration pause_length{};

  // Throws asgd::ConfigError naming the offending key (delay.*) for a value outside the
  // ranges above (NaN and infinity included).
  void Validate() const;
};

class DelayModel {
 public:
  // Validates options. REQUIRES: workers >= 1.
  DelayModel(const DelayOptions& options, int workers, uint64_t seed);

  // Worker w's next step time (advances w's generators by one step). measured is the
  // real CPU time of the step's gradient; used only when compute is kMeasured.
  Duration StepTime(int worker, Duration measured = Duration::zero());
  // For real runs: how long to sleep after a step that really took `measured`, so that
  // it takes StepTime(worker, measured): max(0, StepTime - measured). (For kMeasured
  // with scale 1, no stragglers and no pauses, 0.)
  Duration ExtraDelay(int worker, Duration measured);

  // The worker's fixed multiplier: straggler factor over speed.
  double Factor(int worker) const;
  bool IsStraggler(int worker) const;
  int workers() const { return static_cast<int>(per_worker_.size()); }
  // Pauses taken so far by a worker.
  int64_t pauses(int worker) const;
  const DelayOptions& options() const { return options_; }

 private:
  struct PerWorker {
    Rng compute;
    Rng pause;
    double factor = 1.0;
    bool straggler = false;
    int64_t pauses = 0;
  };
  double DrawBase(Rng& rng, Duration measured) const;  // seconds

  DelayOptions options_;
  double mean_s_ = 0, stddev_s_ = 0;
  double ln_mu_ = 0, ln_sigma_ = 0;  // lognormal
  double pareto_scale_s_ = 0;
  std::vector<PerWorker> per_worker_;
};

// CPU time consumed so far by the calling OS thread (CLOCK_THREAD_CPUTIME_ID). Tasks of
// one scheduler share its thread, so a task measures its own work by reading this before
// and after it without suspending in between.
Duration ThreadCpuTime();

}  // namespace asgd::sim
