#include "sim/delay_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <time.h>

#include "core/check.h"
#include "core/error.h"
#include "sim/option_keys.h"
#include "sim/validate.h"

namespace asgd::sim {
namespace {

constexpr std::string_view kKindNames[] = {"measured",  "constant",    "normal",
                                           "lognormal", "exponential", "pareto"};

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }
double Millis(Duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

Duration FromSeconds(double s) {
  // Rounded to the nanosecond; clamped so a Pareto tail cannot overflow the clock
  // (about 292 years).
  constexpr double kMax = 9.0e18;
  const double ns = std::min(std::round(s * 1e9), kMax);
  return Duration(static_cast<Duration::rep>(ns));
}

}  // namespace

std::string_view ComputeKindName(ComputeKind kind) {
  return kKindNames[static_cast<std::size_t>(kind)];
}

ComputeKind ParseComputeKind(std::string_view name, std::string_view key) {
  for (std::size_t i = 0; i < std::size(kKindNames); ++i) {
    if (name == kKindNames[i]) return static_cast<ComputeKind>(i);
  }
  throw ConfigError(std::string(key), std::string(name),
                    "one of measured, constant, normal, lognormal, exponential, pareto");
}

void DelayOptions::Validate() const {
  RequireFinite(keys::kMeasuredScale, measured_scale, "> 0", measured_scale > 0);
  RequireFinite(keys::kMeanMs, Millis(mean), "> 0 (milliseconds)", mean > Duration::zero());
  RequireFinite(keys::kStddevMs, Millis(stddev), ">= 0 (milliseconds)", stddev >= Duration::zero());
  RequireFinite(keys::kParetoShape, pareto_shape, "> 1 (a Pareto shape <= 1 has no finite mean)",
                pareto_shape > 1);
  if (speeds.empty()) {
    throw ConfigError(std::string(keys::kSpeeds), "", "a comma-separated list of numbers > 0");
  }
  for (double s : speeds) {
    RequireFinite(keys::kSpeeds, s, "a comma-separated list of numbers > 0", s > 0);
  }
  RequireFinite(keys::kStragglerFraction, straggler_fraction, "a fraction in [0, 1]",
                straggler_fraction >= 0 && straggler_fraction <= 1);
  RequireFinite(keys::kStragglerFactor, straggler_factor, ">= 1 (times slower)",
                straggler_factor >= 1);
  RequireFinite(keys::kPauseProbability, pause_probability, "a probability in [0, 1]",
                pause_probability >= 0 && pause_probability <= 1);
  RequireFinite(keys::kPauseMs, Millis(pause_length), ">= 0 (milliseconds)",
                pause_length >= Duration::zero());
}

DelayModel::DelayModel(const DelayOptions& options, int workers, uint64_t seed)
    : options_(options) {
  options_.Validate();
  ASGD_CHECK_GE(workers, 1);
  mean_s_ = Seconds(options_.mean);
  stddev_s_ = Seconds(options_.stddev);
  const double cv2 = (stddev_s_ / mean_s_) * (stddev_s_ / mean_s_);
  ln_sigma_ = std::sqrt(std::log1p(cv2));
  ln_mu_ = std::log(mean_s_) - 0.5 * ln_sigma_ * ln_sigma_;
  pareto_scale_s_ = mean_s_ * (options_.pareto_shape - 1) / options_.pareto_shape;

  per_worker_.reserve(static_cast<std::size_t>(workers));
  for (int w = 0; w < workers; ++w) {
    const auto wi = static_cast<uint64_t>(w);
    per_worker_.push_back(PerWorker{Rng(DeriveSeed(seed, "sim.compute", wi)),
                                    Rng(DeriveSeed(seed, "sim.pause", wi))});
  }
  // Exactly round(f * n) stragglers: the first ones of a seeded permutation.
  const auto n = static_cast<std::size_t>(workers);
  const auto stragglers = static_cast<std::size_t>(
      std::llround(options_.straggler_fraction * static_cast<double>(workers)));
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  Rng pick(DeriveSeed(seed, "sim.stragglers"));
  pick.Shuffle(std::span<int>(order));
  for (std::size_t i = 0; i < std::min(stragglers, n); ++i) {
    per_worker_[static_cast<std::size_t>(order[i])].straggler = true;
  }
  for (std::size_t w = 0; w < n; ++w) {
    PerWorker& p = per_worker_[w];
    const double speed = options_.speeds[w % options_.speeds.size()];
    p.factor = (p.straggler ? options_.straggler_factor : 1.0) / speed;
  }
}

double DelayModel::DrawBase(Rng& rng, Duration measured) const {
  switch (options_.compute) {
    case ComputeKind::kMeasured:
      return Seconds(measured) * options_.measured_scale;
    case ComputeKind::kConstant:
      return mean_s_;
    case ComputeKind::kNormal:
      // Truncation by redrawing: mean > 0, so each draw is accepted with probability > 1/2.
      for (;;) {
        const double x = mean_s_ + stddev_s_ * rng.Normal();
        if (x >= 0) return x;
      }
    case ComputeKind::kLogNormal:
      return std::exp(ln_mu_ + ln_sigma_ * rng.Normal());
    case ComputeKind::kExponential:
      // 1 - U is in (0, 1], so the log is finite.
      return -mean_s_ * std::log(1.0 - rng.Uniform());
    case ComputeKind::kPareto:
      return pareto_scale_s_ / std::pow(1.0 - rng.Uniform(), 1.0 / options_.pareto_shape);
  }
  ASGD_CHECK(false, "unknown compute kind");
  return 0;
}

Duration DelayModel::StepTime(int worker, Duration measured) {
  ASGD_CHECK(worker >= 0 && worker < workers(), "sim: no worker ", worker);
  PerWorker& p = per_worker_[static_cast<std::size_t>(worker)];
  Duration t = FromSeconds(DrawBase(p.compute, measured) * p.factor);
  // Pauses draw from their own stream, so turning them on leaves the compute draws as
  // they were.
  if (options_.pause_probability > 0 && p.pause.Uniform() < options_.pause_probability) {
    ++p.pauses;
    t += options_.pause_length;
  }
  return t;
}

Duration DelayModel::ExtraDelay(int worker, Duration measured) {
  return std::max(StepTime(worker, measured) - measured, Duration::zero());
}

double DelayModel::Factor(int worker) const {
  ASGD_CHECK(worker >= 0 && worker < workers(), "sim: no worker ", worker);
  return per_worker_[static_cast<std::size_t>(worker)].factor;
}

bool DelayModel::IsStraggler(int worker) const {
  ASGD_CHECK(worker >= 0 && worker < workers(), "sim: no worker ", worker);
  return per_worker_[static_cast<std::size_t>(worker)].straggler;
}

int64_t DelayModel::pauses(int worker) const {
  ASGD_CHECK(worker >= 0 && worker < workers(), "sim: no worker ", worker);
  return per_worker_[static_cast<std::size_t>(worker)].pauses;
}

Duration ThreadCpuTime() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

}  // namespace asgd::sim
