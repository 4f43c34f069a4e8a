// The invariants of docs/algorithms.md#equivalences-and-invariants for elastic averaging (EASGD,
// AEASGD,
// AEAMSGD) and model averaging, on the in-memory store (invariants_test.cc has the
// synchronous and delay-aware strategies): exchanges conserve the sum of workers and
// centre, contract their distance at the rates the papers state, and reduce to SGD where
// they should.
#include <cmath>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/elastic.h"
#include "core/error.h"
#include "tests/algorithms/strategy_harness.h"

namespace asgd::algorithms {
namespace {

using namespace ::asgd::algorithms::testing;  // NOLINT: the fixtures of this suite

// ---- Elastic averaging --------------------------------------------------------------

// The sum Σ_i x^i + x̃ of a run: the workers' local parameters and the centre.
std::vector<double> ElasticSum(const Harness& h) {
  std::vector<double> sum(kDim, 0.0);
  const auto centre = h.store->values();
  for (int i = 0; i < kDim; ++i)
    sum[static_cast<std::size_t>(i)] = centre[static_cast<std::size_t>(i)];
  for (std::size_t w = 0; w < h.size(); ++w) {
    const auto x = h.local(w);
    for (int i = 0; i < kDim; ++i)
      sum[static_cast<std::size_t>(i)] += x[static_cast<std::size_t>(i)];
  }
  return sum;
}

// A gradient that records Σ g over every call (to check conservation against).
struct GradientLog {
  std::mutex mu;
  std::vector<double> sum = std::vector<double>(kDim, 0.0);
  GradientFn Wrap(GradientFn fn) {
    return [this, fn](std::span<const float> p, std::span<float> g) {
      const float loss = fn(p, g);
      std::lock_guard<std::mutex> lock(mu);
      for (int i = 0; i < kDim; ++i)
        sum[static_cast<std::size_t>(i)] += g[static_cast<std::size_t>(i)];
      return loss;
    };
  }
};

// easgd, aeasgd: exchanges conserve Σ x^i + x̃; only the local gradient steps
// (−η·g each, plain SGD) change it, whatever the interleaving.
TEST(Elastic, ExchangesConserveTheSumOfWorkersAndCentre) {
  for (const char* name : {"easgd", "aeasgd"}) {
    SCOPED_TRACE(name);
    std::vector<std::unique_ptr<Quadratic>> data;  // per-worker data
    StrategyOptions so = Options(0.05, 3);
    so.settings.Set("elastic_alpha", 0.2);
    Harness h(name, 3, so);
    GradientLog log;
    for (int w = 0; w < 3; ++w) {
      data.push_back(std::make_unique<Quadratic>(kDim, static_cast<float>(2 * w)));
      h.gradients[static_cast<std::size_t>(w)] = log.Wrap(data.back()->Fn());
    }
    h.Start();  // every worker reads x̃0 before anyone exchanges: Σ x^i + x̃ = (n + 1)·x̃0
    h.RunThreads(31);
    const auto sum = ElasticSum(h);
    for (int i = 0; i < kDim; ++i) {
      const auto k = static_cast<std::size_t>(i);
      const double expected = 4.0 * kInit[k] - 0.05 * log.sum[k];
      EXPECT_NEAR(sum[k], expected, 1e-4 * std::max(1.0, std::abs(expected))) << i;
    }
    EXPECT_NE(h.store->values(), kInit);  // the centre moved
  }
}

// One gradient step g0 at the start, then none: the workers' common offset from the
// centre d = x − x̃ contracts by 1 − α − β per synchronous exchange (β = nα, every worker
// identical: the symmetric mode), and everything converges to the consensus.
TEST(Elastic, SynchronousExchangeContractsBy1MinusAlphaMinusBeta) {
  constexpr int kWorkers = 3;
  constexpr double kAlpha = 0.1, kEta = 0.5;
  StrategyOptions so = Options(kEta, 1);
  so.settings.Set("elastic_alpha", kAlpha);
  Harness h("easgd", kWorkers, so);
  for (int w = 0; w < kWorkers; ++w) {
    auto first = std::make_shared<bool>(true);
    h.gradients[static_cast<std::size_t>(w)] = [first](std::span<const float>, std::span<float> g) {
      std::fill(g.begin(), g.end(), *first ? 1.0f : 0.0f);
      *first = false;
      return 0.0f;
    };
  }
  constexpr int kSteps = 8;  // step 0: x ← x̃0 − η; steps 1..7: one exchange each
  h.RunThreads(kSteps);
  const double d1 = -kEta;
  const double factor = 1.0 - kAlpha - kWorkers * kAlpha;
  const double d = d1 * std::pow(factor, kSteps - 1);
  const double total = kWorkers * -kEta;  // Σ x^i + x̃ − (n + 1)·x̃0, conserved
  for (int i = 0; i < kDim; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const double x = h.local(0)[k] - kInit[k], c = h.store->values()[k] - kInit[k];
    EXPECT_NEAR(x - c, d, 1e-5) << i;
    EXPECT_NEAR(kWorkers * x + c, total, 1e-5) << i;  // conservation
  }
  h.RunThreads(200);
  for (int i = 0; i < kDim; ++i) {
    const auto k = static_cast<std::size_t>(i);
    EXPECT_NEAR(h.store->values()[k] - kInit[k], total / (kWorkers + 1), 1e-5) << "consensus " << i;
  }
}

// The same symmetric mode past the stability condition: with α(n + 1) > 2 the factor
// 1 − α(n + 1) is below −1 and the offset grows at every exchange (the workers and the
// centre swing apart). easgd's registry check refuses exactly these moving rates:
// α(n + 1) >= 2, and accepts the default 0.9/n.
TEST(Elastic, SynchronousExchangePastTheStabilityConditionGrowsTheOffset) {
  constexpr int kWorkers = 3;
  constexpr double kAlpha = 0.6, kEta = 0.5;  // α(n + 1) = 2.4: factor −1.4
  StrategyOptions so = Options(kEta, 1);
  so.settings.Set("elastic_alpha", kAlpha);
  Harness h("easgd", kWorkers, so);
  for (int w = 0; w < kWorkers; ++w) {
    auto first = std::make_shared<bool>(true);
    h.gradients[static_cast<std::size_t>(w)] = [first](std::span<const float>, std::span<float> g) {
      std::fill(g.begin(), g.end(), *first ? 1.0f : 0.0f);
      *first = false;
      return 0.0f;
    };
  }
  constexpr int kSteps = 6;
  h.RunThreads(kSteps);
  const double factor = 1.0 - kAlpha * (kWorkers + 1);
  const double d = -kEta * std::pow(factor, kSteps - 1);
  for (int i = 0; i < kDim; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const double x = h.local(0)[k] - kInit[k], c = h.store->values()[k] - kInit[k];
    EXPECT_NEAR(x - c, d, 1e-4) << i;
    EXPECT_GT(std::abs(x - c), 5 * kEta) << i;  // 1.4⁵ ≈ 5.4 times the first offset
  }

  const Strategy& easgd = FindStrategy("easgd");
  ASSERT_TRUE(easgd.check);
  so.num_workers = kWorkers;  // as the harness ran it
  EXPECT_THROW(easgd.check(so), ConfigError);
  StrategyOptions edge;
  edge.num_workers = kWorkers;
  edge.settings.Set("elastic_alpha", 0.5);  // α(n + 1) = 2: factor −1, no contraction
  EXPECT_THROW(easgd.check(edge), ConfigError);
  edge.settings.Set("elastic_alpha", 0.49);
  EXPECT_NO_THROW(easgd.check(edge));
  edge.settings.Set("elastic_alpha", 0);  // the paper's β = 0.9: α = 0.9/n
  EXPECT_NO_THROW(easgd.check(edge));
  edge.num_workers = 1;
  EXPECT_NO_THROW(easgd.check(edge));  // α = 0.9, α(n + 1) = 1.8
}

// aeasgd: one asynchronous worker, zero gradients after the first step: the offset
// contracts by 1 − 2α per exchange; α = 0.5 meets at the midpoint at once; α = 1 swaps
// (the registry check refuses it, below; the harness builds the rule without the check).
TEST(Elastic, AsynchronousExchangeContractsBy1MinusTwoAlpha) {
  for (double alpha : {0.1, 0.5, 1.0}) {
    SCOPED_TRACE(alpha);
    StrategyOptions so = Options(0.5, 1);
    so.settings.Set("elastic_alpha", alpha);
    Harness h("aeasgd", 1, so);
    auto first = std::make_shared<bool>(true);
    h.gradients[0] = [first](std::span<const float>, std::span<float> g) {
      std::fill(g.begin(), g.end(), *first ? 1.0f : 0.0f);
      *first = false;
      return 0.0f;
    };
    h.Run(1);  // exchange at t = 0 (no-op), then x ← x̃0 − 0.5
    h.Run(1);  // one exchange
    for (int i = 0; i < kDim; ++i) {
      const auto k = static_cast<std::size_t>(i);
      const double x = h.local(0)[k] - kInit[k], c = h.store->values()[k] - kInit[k];
      EXPECT_NEAR(x - c, -0.5 * (1.0 - 2.0 * alpha), 1e-6) << i;
      EXPECT_NEAR(x + c, -0.5, 1e-6) << i;
    }
  }
}

// The asynchronous exchange's factor 1 − 2α is −1 at α = 1: the worker and the centre swap
// at every exchange and never converge (above). aeasgd's and aeamsgd's registry checks
// refuse it, naming algorithm.elastic_alpha, its value and the range 0 < α < 1; they
// accept α just below 1 and the default 0.9/n (0.9 for one worker).
TEST(Elastic, AsynchronousStrategiesRefuseAnAlphaOfOne) {
  for (const char* name : {"aeasgd", "aeamsgd"}) {
    SCOPED_TRACE(name);
    const Strategy& s = FindStrategy(name);
    ASSERT_TRUE(s.check);
    StrategyOptions so = Options(0.1, 1);
    so.num_workers = 2;
    so.settings.Set("elastic_alpha", 1);
    try {
      s.check(so);
      FAIL() << "elastic_alpha = 1 was accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.key(), "algorithm.elastic_alpha");
      EXPECT_EQ(e.value(), "1");
      const std::string what = e.what();
      EXPECT_NE(what.find("0 < elastic_alpha < 1 with " + std::string(name)), std::string::npos)
          << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
    for (const double alpha : {0.999, 0.5, 0.0}) {
      so.settings.Set("elastic_alpha", alpha);
      EXPECT_NO_THROW(s.check(so)) << alpha;
    }
    so.num_workers = 1;  // the default α = 0.9
    EXPECT_NO_THROW(s.check(so));
  }
}

// easgd, the modes with Σd = 0: two workers pushed to opposite sides of the centre
// by one gradient step (±g0), then none. The centre does not move (the elastic terms
// cancel in its sum) and each offset d^i = x^i − x̃ contracts by 1 − α per synchronous
// exchange (not 1 − α − β: that is the symmetric mode, tested above).
TEST(Elastic, SynchronousExchangeWithOppositeOffsetsContractsBy1MinusAlpha) {
  constexpr double kAlpha = 0.2, kEta = 0.5;
  StrategyOptions so = Options(kEta, 1);
  so.settings.Set("elastic_alpha", kAlpha);
  Harness h("easgd", 2, so);
  for (int w = 0; w < 2; ++w) {
    auto first = std::make_shared<bool>(true);
    const float sign = w == 0 ? 1.0f : -1.0f;
    h.gradients[static_cast<std::size_t>(w)] = [first, sign](std::span<const float>,
                                                             std::span<float> g) {
      std::fill(g.begin(), g.end(), *first ? sign : 0.0f);
      *first = false;
      return 0.0f;
    };
  }
  constexpr int kSteps = 6;  // step 0: x^0 ← x̃0 − η, x^1 ← x̃0 + η; then one exchange each
  h.RunThreads(kSteps);
  const double d = kEta * std::pow(1.0 - kAlpha, kSteps - 1);
  for (int i = 0; i < kDim; ++i) {
    const auto k = static_cast<std::size_t>(i);
    EXPECT_NEAR(h.store->values()[k], kInit[k], 1e-6) << "the centre moved at " << i;
    EXPECT_NEAR(h.local(0)[k] - kInit[k], -d, 1e-6) << i;
    EXPECT_NEAR(h.local(1)[k] - kInit[k], d, 1e-6) << i;
  }
}

// easgd: every worker starting at the centre with identical data. As written there
// ("the elastic terms stay 0") it holds only while the gradient is 0 — after a gradient
// step x^i ≠ x̃ — so both parts are tested: (a) from the optimum (zero gradient) the
// elastic terms stay exactly 0 and nothing moves; (b) from elsewhere every worker's
// elastic term is the same, so the workers stay identical to one another, bit for bit,
// and the run is one worker's SGD with the centre a moving average with β = nα:
//   g = ∇f(x); e = α(x − x̃); x ← x − e − ηg; x̃ ← x̃ + n·e.
TEST(Elastic, IdenticalDataKeepsWorkersIdenticalAndElasticTermsAtZeroAtTheOptimum) {
  constexpr int kWorkers = 3;
  constexpr double kAlpha = 0.1, kEta = 0.2;
  StrategyOptions so = Options(kEta, 1);
  so.settings.Set("elastic_alpha", kAlpha);
  {
    const Quadratic q(kDim);
    Harness at_optimum("easgd", kWorkers, so, "sgd", q.c);
    at_optimum.RunThreads(10);
    EXPECT_EQ(at_optimum.store->values(), q.c);
    for (std::size_t w = 0; w < kWorkers; ++w) EXPECT_EQ(at_optimum.local(w), q.c) << w;
  }
  Harness h("easgd", kWorkers, so);
  constexpr int kSteps = 12;
  h.RunThreads(kSteps);
  for (std::size_t w = 1; w < kWorkers; ++w) EXPECT_EQ(h.local(w), h.local(0)) << w;
  std::vector<double> x(kInit.begin(), kInit.end()), c = x;
  for (int t = 0; t < kSteps; ++t) {
    for (int i = 0; i < kDim; ++i) {
      const auto k = static_cast<std::size_t>(i);
      const double g = h.q.h[k] * (x[k] - h.q.c[k]);
      const double e = kAlpha * (x[k] - c[k]);
      x[k] -= e + kEta * g;
      c[k] += kWorkers * e;
    }
  }
  for (int i = 0; i < kDim; ++i) {
    const auto k = static_cast<std::size_t>(i);
    EXPECT_NEAR(h.local(0)[k], x[k], 1e-5) << i;
    EXPECT_NEAR(h.store->values()[k], c[k], 1e-5) << i;
  }
}

// aeamsgd: EAMSGD's exchanges conserve Σ x^i + x̃ as AEASGD's do; with momentum the
// local steps move it by Σ v (not −η Σ g): a gradient g_j taken at a worker's step j of
// K contributes −η·g_j·(1 − δ^(K−j+1))/(1 − δ) by the end (the velocity keeps carrying
// it; exchanges never touch v).
TEST(Elastic, EamsgdExchangesConserveTheSumOfWorkersAndCentre) {
  constexpr int kWorkers = 3, kSteps = 31;
  constexpr double kEta = 0.05, kDelta = 0.5;
  StrategyOptions so = Options(kEta, 3);
  so.settings.Set("elastic_alpha", 0.2);
  so.worker_momentum = kDelta;
  Harness h("aeamsgd", kWorkers, so);
  std::vector<std::unique_ptr<Quadratic>> data;
  std::vector<std::vector<std::vector<float>>> grads(kWorkers);  // per worker, per step
  for (int w = 0; w < kWorkers; ++w) {
    data.push_back(std::make_unique<Quadratic>(kDim, static_cast<float>(2 * w)));
    const GradientFn fn = data.back()->Fn();
    auto* log = &grads[static_cast<std::size_t>(w)];  // one thread per worker writes it
    h.gradients[static_cast<std::size_t>(w)] = [fn, log](std::span<const float> p,
                                                         std::span<float> g) {
      const float loss = fn(p, g);
      log->emplace_back(g.begin(), g.end());
      return loss;
    };
  }
  h.Start();  // every worker reads x̃0 before anyone exchanges: Σ x^i + x̃ = (n + 1)·x̃0
  h.RunThreads(kSteps);
  const auto sum = ElasticSum(h);
  for (int i = 0; i < kDim; ++i) {
    const auto k = static_cast<std::size_t>(i);
    double expected = (kWorkers + 1.0) * kInit[k];
    for (const auto& log : grads) {
      const auto n = static_cast<int>(log.size());
      ASSERT_EQ(n, kSteps);
      for (int j = 1; j <= n; ++j) {
        expected -= kEta * log[static_cast<std::size_t>(j - 1)][k] *
                    (1.0 - std::pow(kDelta, n - j + 1)) / (1.0 - kDelta);
      }
    }
    EXPECT_NEAR(sum[k], expected, 1e-4 * std::max(1.0, std::abs(expected))) << i;
  }
  EXPECT_NE(h.store->values(), kInit);  // the centre moved
}

// aeasgd: one AEASGD worker with α = 0 is plain SGD and the centre never moves. The
// config cannot ask for α = 0 (algorithm.elastic_alpha = 0 means the paper's β/n, and
// α = 0 would be independent SGD runs, which `sgd` already is), so the rule is built
// with α = 0 directly.
TEST(Elastic, AeasgdOneWorkerWithAlphaZeroIsSgd) {
  constexpr int kSteps = 20;
  Harness h("aeasgd", 1, Options(0.1, 2), "sgd", kInit, NewElasticRule(0.0));
  h.Run(kSteps);
  EXPECT_EQ(h.local(0), Sequential(h.q, "sgd", 0.1, kSteps));
  EXPECT_EQ(h.store->values(), kInit);
}

// aeamsgd: EAMSGD with δ = 0 is AEASGD (local SGD), bit for bit.
TEST(Elastic, EamsgdWithoutMomentumIsAeasgd) {
  StrategyOptions so = Options(0.1, 2);
  so.settings.Set("elastic_alpha", 0.3);
  so.worker_momentum = 0.0;
  ExpectEquivalent("aeamsgd", so, "aeasgd", so, 3, 12);
}

// aeamsgd: the Nesterov look-ahead is at x + δv (dist-keras evaluates at x − δv). On
// f(x) = ½hx², from (x, v) one local step gives x + δv − ηh(x + δv). No exchange moves
// anything here: the only one is at t = 0, when the worker is at the centre.
TEST(Elastic, EamsgdLooksAheadAlongTheVelocity) {
  constexpr double kDelta = 0.9, kEta = 0.1;
  StrategyOptions so = Options(kEta, 1000);
  so.worker_momentum = kDelta;
  Harness h("aeamsgd", 1, so);
  h.Run(1);  // v = −η g(x0), x1 = x0 + v
  const auto x1 = h.local(0);
  h.Run(1);
  const auto x2 = h.local(0);
  for (int i = 0; i < kDim; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const double hh = h.q.h[k], c = h.q.c[k];
    const double v1 = -kEta * hh * (kInit[k] - c);
    EXPECT_NEAR(x1[k], kInit[k] + v1, 1e-6) << i;
    const double look = x1[k] + kDelta * v1;
    EXPECT_NEAR(x2[k], look - kEta * hh * (look - c), 1e-5) << i;
    if (std::abs(v1) > 1e-3) {                   // (where the velocity is not zero)
      const double wrong = x1[k] - kDelta * v1;  // the flipped look-ahead
      EXPECT_GT(std::abs(x2[k] - (x1[k] + kDelta * v1 - kEta * hh * (wrong - c))), 1e-4) << i;
    }
  }
}

// aeamsgd: with a constant gradient, v_k = −ηg(1 − δ^k)/(1 − δ), so
// x_k = x_0 − ηg Σ_{j ≤ k} (1 − δ^j)/(1 − δ).
TEST(Elastic, EamsgdVelocityUnderAConstantGradient) {
  constexpr double kDelta = 0.5, kEta = 0.125;
  StrategyOptions so = Options(kEta, 1000);
  so.worker_momentum = kDelta;
  Harness h("aeamsgd", 1, so);
  h.gradients[0] = [](std::span<const float>, std::span<float> g) {
    std::fill(g.begin(), g.end(), 1.0f);
    return 0.0f;
  };
  constexpr int kSteps = 6;
  h.Run(kSteps);
  double moved = 0;
  for (int j = 1; j <= kSteps; ++j) moved += -kEta * (1.0 - std::pow(kDelta, j)) / (1.0 - kDelta);
  for (int i = 0; i < kDim; ++i)
    EXPECT_NEAR(h.local(0)[static_cast<std::size_t>(i)], kInit[static_cast<std::size_t>(i)] + moved,
                1e-5)
        << i;
}

// ---- Model averaging ---------------------------------------------------------------

// model_averaging: every W steps the centre becomes exactly the mean of the workers' parameters,
// from a fresh sum each round (dist-keras's buffer leaks across rounds); one worker is
// sequential training.
TEST(ModelAveraging, CentreIsTheMeanOfEachRoundAndOneWorkerIsSequential) {
  constexpr int kWorkers = 2, kWindow = 3, kRounds = 4;
  Harness h("model_averaging", kWorkers, Options(0.1, kWindow));
  std::vector<std::unique_ptr<Quadratic>> data;
  for (int w = 0; w < kWorkers; ++w) {
    data.push_back(std::make_unique<Quadratic>(kDim, 3.0f * static_cast<float>(w)));
    h.gradients[static_cast<std::size_t>(w)] = data.back()->Fn();
  }
  h.RunThreads(kWindow * kRounds);
  // The reference, in the rule's order: each worker W SGD steps from the centre; the sum
  // in worker order, times 1/n.
  std::vector<float> centre = kInit;
  for (int r = 0; r < kRounds; ++r) {
    std::vector<float> sum(kDim, 0.0f);
    for (int w = 0; w < kWorkers; ++w) {
      std::vector<float> x = centre, g(kDim);
      auto opt = MakeOptimizer("sgd");
      for (int s = 0; s < kWindow; ++s) {
        data[static_cast<std::size_t>(w)]->Fn()(x, g);
        opt->Step(x, g, 0.1f);
      }
      for (int i = 0; i < kDim; ++i)
        sum[static_cast<std::size_t>(i)] += x[static_cast<std::size_t>(i)];
    }
    for (int i = 0; i < kDim; ++i)
      centre[static_cast<std::size_t>(i)] = sum[static_cast<std::size_t>(i)] * (1.0f / kWorkers);
  }
  EXPECT_EQ(h.store->values(), centre);
  EXPECT_EQ(h.store->version(), static_cast<uint64_t>(kRounds));

  Harness one("model_averaging", 1, Options(0.1, kWindow), "momentum");
  one.RunThreads(kWindow * kRounds);
  EXPECT_EQ(one.store->values(), Sequential(one.q, "momentum", 0.1, kWindow * kRounds));
}

// model_averaging: identical data and initialisation ⇒ the average equals each worker, so n workers
// are sequential SGD (to the rounding of the mean: (x + x + x)·⅓ may differ from x by an
// ulp).
TEST(ModelAveraging, IdenticalDataAverageEqualsEachWorker) {
  constexpr int kWorkers = 3, kWindow = 4, kRounds = 5;
  Harness h("model_averaging", kWorkers, Options(0.1, kWindow));
  h.RunThreads(kWindow * kRounds);
  for (std::size_t w = 1; w < kWorkers; ++w) EXPECT_EQ(h.local(w), h.local(0)) << w;
  ExpectNear(h.store->values(), h.local(0), 1e-6, "centre vs worker 0");
  ExpectNear(h.store->values(), Sequential(h.q, "sgd", 0.1, kWindow * kRounds), 1e-5,
             "centre vs sequential");
}

}  // namespace
}  // namespace asgd::algorithms
