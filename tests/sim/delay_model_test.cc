#include "sim/delay_model.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"

namespace asgd::sim {
namespace {

using std::chrono::milliseconds;

double Ms(Duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct DistributionCase {
  const char* name;
  DelayOptions options;
  double mean_ms;
  double stddev_ms;  // of one draw: the bound is 5 standard errors of the sample mean
};

std::vector<DistributionCase> Cases() {
  std::vector<DistributionCase> cases;
  auto make = [](ComputeKind kind, double mean, double sd, double shape = 3) {
    DelayOptions o;
    o.compute = kind;
    o.mean = Duration(static_cast<int64_t>(mean * 1e6));
    o.stddev = Duration(static_cast<int64_t>(sd * 1e6));
    o.pareto_shape = shape;
    return o;
  };
  // Normal: truncation at 0 is 3.3 standard deviations away and moves the mean by
  // 0.005 ms, a tenth of the bound.
  cases.push_back({"normal", make(ComputeKind::kNormal, 10, 3), 10, 3});
  cases.push_back({"lognormal", make(ComputeKind::kLogNormal, 10, 5), 10, 5});
  cases.push_back({"exponential", make(ComputeKind::kExponential, 10, 0), 10, 10});
  // Pareto alpha = 3: variance x_m^2 alpha / ((alpha-1)^2 (alpha-2)) with x_m = 20/3.
  const double xm = 10.0 * 2 / 3;
  cases.push_back(
      {"pareto", make(ComputeKind::kPareto, 10, 0, 3), 10, std::sqrt(xm * xm * 3 / (4 * 1))});
  cases.push_back({"constant", make(ComputeKind::kConstant, 10, 0), 10, 0});
  return cases;
}

TEST(DelayModel, SampleMeansAreWithinFiveStandardErrors) {
  constexpr int kWorkers = 4, kDraws = 50'000;
  for (const auto& c : Cases()) {
    DelayModel model(c.options, kWorkers, 42);
    double sum = 0;
    for (int i = 0; i < kDraws; ++i) {
      const double x = Ms(model.StepTime(i % kWorkers));
      ASSERT_GE(x, 0) << c.name;
      sum += x;
    }
    const double mean = sum / kDraws;
    const double bound = 5 * c.stddev_ms / std::sqrt(double{kDraws}) + 1e-6;  // + rounding to ns
    EXPECT_NEAR(mean, c.mean_ms, bound) << c.name;
  }
}

TEST(DelayModel, LogNormalHasTheRequestedSpread) {
  DelayOptions o;
  o.compute = ComputeKind::kLogNormal;
  o.mean = milliseconds(10);
  o.stddev = milliseconds(5);
  DelayModel model(o, 1, 3);
  double sum = 0, sum2 = 0;
  constexpr int kDraws = 100'000;
  for (int i = 0; i < kDraws; ++i) {
    const double x = Ms(model.StepTime(0));
    sum += x;
    sum2 += x * x;
  }
  const double mean = sum / kDraws;
  EXPECT_NEAR(std::sqrt(sum2 / kDraws - mean * mean), 5.0, 0.25);
}

TEST(DelayModel, StragglerFractionPicksExactlyRoundFN) {
  DelayOptions o;
  o.compute = ComputeKind::kConstant;
  o.straggler_factor = 4;
  for (int n : {1, 3, 10, 16, 101, 1024}) {
    for (double f : {0.0, 0.05, 0.1, 0.25, 0.5, 1.0}) {
      o.straggler_fraction = f;
      DelayModel model(o, n, 11);
      int stragglers = 0;
      for (int w = 0; w < n; ++w) {
        if (model.IsStraggler(w)) {
          ++stragglers;
          EXPECT_EQ(model.StepTime(w), milliseconds(40));
        } else {
          EXPECT_EQ(model.StepTime(w), milliseconds(10));
        }
      }
      EXPECT_EQ(stragglers, std::llround(f * n)) << "f=" << f << " n=" << n;
    }
  }
  // The seed chooses which ones.
  o.straggler_fraction = 0.25;
  DelayModel a(o, 64, 1), b(o, 64, 2);
  int differ = 0;
  for (int w = 0; w < 64; ++w) differ += a.IsStraggler(w) != b.IsStraggler(w);
  EXPECT_GT(differ, 0);
}

TEST(DelayModel, SpeedsApplyCyclicallyAndMeasuredTimeIsScaled) {
  DelayOptions o;
  o.compute = ComputeKind::kMeasured;
  o.measured_scale = 0.5;
  o.speeds = {1, 4};  // a mixed cluster: every other worker four times as fast
  DelayModel model(o, 5, 0);
  EXPECT_EQ(model.StepTime(0, milliseconds(8)), milliseconds(4));
  EXPECT_EQ(model.StepTime(1, milliseconds(8)), milliseconds(1));
  EXPECT_EQ(model.StepTime(4, milliseconds(8)), milliseconds(4));
  EXPECT_DOUBLE_EQ(model.Factor(3), 0.25);
  // A real run sleeps only the difference (here none: the model is faster than reality).
  EXPECT_EQ(model.ExtraDelay(0, milliseconds(8)), Duration::zero());
  o.measured_scale = 3;
  DelayModel slow(o, 1, 0);
  EXPECT_EQ(slow.ExtraDelay(0, milliseconds(8)), milliseconds(16));
}

TEST(DelayModel, PausesComeWithTheirProbability) {
  DelayOptions o;
  o.compute = ComputeKind::kConstant;
  o.pause_probability = 0.1;
  o.pause_length = milliseconds(100);
  DelayModel model(o, 2, 5);
  constexpr int kSteps = 20'000;
  int paused = 0;
  for (int i = 0; i < kSteps; ++i) {
    const Duration t = model.StepTime(0);
    ASSERT_TRUE(t == milliseconds(10) || t == milliseconds(110));
    paused += t == milliseconds(110);
  }
  EXPECT_EQ(model.pauses(0), paused);
  // Binomial(20000, 0.1): standard deviation 42.
  EXPECT_NEAR(paused, 2000, 5 * 42);
}

TEST(DelayModel, DrawsDependOnlyOnTheWorkerNotOnTheInterleaving) {
  DelayOptions o;
  o.compute = ComputeKind::kExponential;
  o.pause_probability = 0.2;
  o.pause_length = milliseconds(3);
  DelayModel in_order(o, 3, 9), interleaved(o, 3, 9);
  std::vector<Duration> a, b;
  for (int i = 0; i < 50; ++i) a.push_back(in_order.StepTime(1));
  for (int i = 0; i < 50; ++i) {
    interleaved.StepTime(0);
    b.push_back(interleaved.StepTime(1));
    interleaved.StepTime(2);
    interleaved.StepTime(2);
  }
  EXPECT_EQ(a, b);
}

TEST(DelayModel, BadOptionsNameTheirKey) {
  struct Bad {
    std::string key;
    DelayOptions options;
  };
  std::vector<Bad> bad;
  auto with = [&](std::string key, auto edit) {
    DelayOptions o;
    edit(o);
    bad.push_back({std::move(key), o});
  };
  with("delay.pareto_shape", [](DelayOptions& o) { o.pareto_shape = 1.0; });
  with("delay.pareto_shape", [](DelayOptions& o) { o.pareto_shape = NAN; });
  with("delay.mean_ms", [](DelayOptions& o) { o.mean = Duration::zero(); });
  with("delay.stddev_ms", [](DelayOptions& o) { o.stddev = milliseconds(-1); });
  with("delay.measured_scale", [](DelayOptions& o) { o.measured_scale = 0; });
  with("delay.speeds", [](DelayOptions& o) { o.speeds = {1, 0}; });
  with("delay.speeds", [](DelayOptions& o) { o.speeds = {}; });
  with("delay.straggler_fraction", [](DelayOptions& o) { o.straggler_fraction = 1.5; });
  with("delay.straggler_factor", [](DelayOptions& o) { o.straggler_factor = 0.5; });
  with("delay.pause_probability", [](DelayOptions& o) { o.pause_probability = -0.1; });
  with("delay.pause_ms", [](DelayOptions& o) { o.pause_length = milliseconds(-5); });
  for (const Bad& b : bad) {
    try {
      DelayModel model(b.options, 4, 0);
      ADD_FAILURE() << b.key << ": accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.key(), b.key);
      const std::string what = e.what();
      EXPECT_NE(what.find(b.key), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  EXPECT_THROW(ParseComputeKind("gamma"), ConfigError);
  EXPECT_EQ(ParseComputeKind("pareto"), ComputeKind::kPareto);
  EXPECT_EQ(ComputeKindName(ComputeKind::kLogNormal), "lognormal");
}

}  // namespace
}  // namespace asgd::sim
