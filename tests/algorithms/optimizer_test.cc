#include "algorithms/optimizer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"

namespace asgd::algorithms {
namespace {

std::unique_ptr<Optimizer> Make(const std::string& name, int64_t n, double momentum = 0.9) {
  OptimizerOptions o;
  o.name = name;
  o.momentum = momentum;
  return NewOptimizer(o, n);
}

TEST(Optimizer, SgdIsThetaMinusLrG) {
  auto opt = Make("sgd", 2);
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, 4.0f};
  opt->Step(p, g, 0.25f);
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.125f);
  EXPECT_FLOAT_EQ(p[1], -3.0f);
}

TEST(Optimizer, MomentumMatchesHandComputation) {
  auto opt = Make("momentum", 1, 0.5);
  std::vector<float> p = {0.0f}, g = {1.0f};
  opt->Step(p, g, 0.1f);  // v = 1, p = -0.1
  opt->Step(p, g, 0.1f);  // v = 1.5, p = -0.25
  EXPECT_FLOAT_EQ(p[0], -0.25f);
}

TEST(Optimizer, MomentumWithConstantGradientApproachesLrOverOneMinusMu) {
  // With constant g, v_k = g(1 − μ^k)/(1 − μ) (the form of docs/algorithms.md#aeamsgd).
  auto opt = Make("momentum", 1, 0.9);
  std::vector<float> p = {0.0f}, g = {1.0f}, prev = {0.0f};
  for (int k = 1; k <= 50; ++k) {
    prev = p;
    opt->Step(p, g, 1.0f);
    const double v = (1.0 - std::pow(0.9, k)) / (1.0 - 0.9);
    EXPECT_NEAR(prev[0] - p[0], v, 1e-4 * v) << "step " << k;
  }
}

TEST(Optimizer, NesterovMatchesLookAheadForm) {
  auto opt = Make("nesterov", 1, 0.5);
  std::vector<float> p = {0.0f}, g = {1.0f};
  opt->Step(p, g, 0.1f);  // v = 1, update = -(1 + 0.5) * 0.1
  EXPECT_FLOAT_EQ(p[0], -0.15f);
  opt->Step(p, g, 0.1f);  // v = 1.5, update = -(1 + 0.75) * 0.1
  EXPECT_FLOAT_EQ(p[0], -0.15f - 0.175f);
}

TEST(Optimizer, AdagradMatchesTensorFlowForm) {
  OptimizerOptions o;
  o.name = "adagrad";
  o.epsilon = 1e-12;
  auto opt = NewOptimizer(o, 1);
  std::vector<float> p = {1.0f}, g = {2.0f};
  opt->Step(p, g, 0.5f);  // a = 0.1 + 4 = 4.1
  EXPECT_NEAR(p[0], 1.0 - 0.5 * 2.0 / std::sqrt(4.1), 1e-6);
}

TEST(Optimizer, AdamFirstStepIsLrTimesSignOfGradient) {
  // With bias correction, Adam's first step is −η·g/(|g| + ε') for every coordinate.
  auto opt = Make("adam", 3);
  std::vector<float> p = {0.0f, 0.0f, 0.0f}, g = {0.3f, -7.0f, 1e-3f};
  opt->Step(p, g, 0.01f);
  EXPECT_NEAR(p[0], -0.01, 1e-6);
  EXPECT_NEAR(p[1], 0.01, 1e-6);
  EXPECT_NEAR(p[2], -0.01, 1e-5);
}

TEST(Optimizer, AppliedAccumulatesExactUpdates) {
  for (const std::string name : {"sgd", "momentum", "nesterov", "adagrad", "adam"}) {
    auto opt = Make(name, 4);
    std::vector<float> p = {1.0f, 2.0f, -3.0f, 0.5f}, start = p;
    std::vector<float> acc(4, 0.0f);
    for (int k = 0; k < 5; ++k) {
      std::vector<float> g = {0.1f * static_cast<float>(k + 1), -0.2f, 0.3f, 0.0f};
      std::vector<float> before = p;
      std::vector<float> step(4, 0.0f);
      opt->Step(p, g, 0.05f, step);
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(before[i] + step[i], p[i]) << name;  // bit-exact: the same addition
        acc[i] += step[i];
      }
    }
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(start[i] + acc[i], p[i], 1e-6) << name;
  }
}

std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (float x : v) out.push_back(std::bit_cast<uint32_t>(x));
  return out;
}

// Optimizer::Accumulate folds a window's bookkeeping into the step; each form must give
// bit for bit what the plain step plus a separate pass gives: assign = add into zeros,
// scale = a multiplication after the add, skip_params = the same slots and update
// without writing params. Weight decay on, so skip_params's read of params counts too;
// the last element's update is −0 (zero gradient at zero), which 0 + u turns into +0.
TEST(Optimizer, AccumulateFormsEqualTheSeparatePassesBitForBit) {
  for (const std::string name : {"sgd", "momentum", "nesterov", "adagrad", "adam"}) {
    OptimizerOptions o;
    o.name = name;
    o.weight_decay = 0.01;
    auto fused = NewOptimizer(o, 4), plain = NewOptimizer(o, 4);
    std::vector<float> p = {1.0f, 2.0f, -3.0f, 0.0f}, q = p;
    std::vector<float> a(4, 7.0f), b(4, 0.0f);  // a's stale values must not leak in
    const float scale = 1.0f / 3.0f;
    for (int k = 0; k < 7; ++k) {
      const std::vector<float> g = {0.1f * static_cast<float>(k + 1), -0.2f, 0.3f, 0.0f};
      const bool first = k % 3 == 0, last = k % 3 == 2, skip = k == 5;
      Optimizer::Accumulate acc;
      acc.applied = a;
      acc.assign = first;
      acc.scale = last ? scale : 1.0f;
      acc.skip_params = skip;
      const std::vector<float> before = p;
      fused->Step(p, g, 0.05f, acc);
      if (first) std::fill(b.begin(), b.end(), 0.0f);
      plain->Step(q, g, 0.05f, b);
      if (last) {
        for (float& x : b) x *= scale;
      }
      EXPECT_EQ(Bits(a), Bits(b)) << name << " step " << k;
      if (skip) {
        EXPECT_EQ(Bits(p), Bits(before)) << name << " step " << k;
        p = q;  // as a pull would
      }
      EXPECT_EQ(Bits(p), Bits(q)) << name << " step " << k;
    }
    EXPECT_EQ(Bits(fused->State()), Bits(plain->State())) << name;
  }
}

TEST(Optimizer, WeightDecayAddsLambdaTheta) {
  OptimizerOptions o;
  o.weight_decay = 0.1;
  auto opt = NewOptimizer(o, 1);
  std::vector<float> p = {2.0f}, g = {0.0f};
  opt->Step(p, g, 1.0f);
  EXPECT_FLOAT_EQ(p[0], 2.0f - 0.2f);
}

TEST(Optimizer, StateRoundTripsAndResetForgets) {
  auto a = Make("adam", 2);
  std::vector<float> p = {1.0f, 1.0f}, g = {0.5f, -0.5f};
  a->Step(p, g, 0.1f);
  a->Step(p, g, 0.1f);
  auto b = Make("adam", 2);
  b->SetState(a->State());
  std::vector<float> pa = p, pb = p;
  a->Step(pa, g, 0.1f);
  b->Step(pb, g, 0.1f);
  EXPECT_EQ(pa, pb);
  a->Reset();
  EXPECT_EQ(a->steps(), 0);
}

TEST(Optimizer, BadOptionsNameTheKey) {
  OptimizerOptions o;
  o.name = "rmsprop";
  try {
    NewOptimizer(o, 1);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "algorithm.optimizer");
  }
  o.name = "momentum";
  o.momentum = 1.0;
  EXPECT_THROW(NewOptimizer(o, 1), ConfigError);
  o.name = "adam";
  o.beta2 = -0.1;
  EXPECT_THROW(NewOptimizer(o, 1), ConfigError);
}

}  // namespace
}  // namespace asgd::algorithms
