// Invariants of issue 21 ("correct to the equation") that had no test: DOWNPOUR's server
// Adagrad with zero gradients, DOWNPOUR's fetch, and staleness_aware with 1 < c < λ.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "algorithms/elastic.h"
#include "core/error.h"
#include "tests/algorithms/strategy_harness.h"

namespace asgd::algorithms {
namespace {

using namespace ::asgd::algorithms::testing;  // NOLINT: the fixtures of this suite

// DOWNPOUR's server Adagrad θ ← θ − γ·Δ/√A has no ε: an accumulator starting at 0 would
// turn every coordinate whose gradient is exactly 0 into 0/0 = NaN. The factory refuses
// A₀ ≤ 0 (a ConfigError, exit 2); with A₀ > 0 those coordinates stay where they are.
TEST(Downpour, ServerAdagradRefusesANonPositiveAccumulator) {
  StrategyOptions so = Options(0.1, 2);
  so.settings.Set("server_optimizer", "adagrad");
  for (double a0 : {0.0, -0.1}) {
    so.server_initial_accumulator = a0;
    EXPECT_THROW(FindStrategy("downpour").server_rule(so, 0), ConfigError) << a0;
  }
  so.server_initial_accumulator = 0.1;
  EXPECT_NO_THROW(FindStrategy("downpour").server_rule(so, 0));
}

TEST(Downpour, ServerAdagradLeavesZeroGradientCoordinatesUnchanged) {
  StrategyOptions so = Options(0.1, 2);
  so.settings.Set("server_optimizer", "adagrad");
  so.settings.Set("server_learning_rate", 0.05);
  so.server_initial_accumulator = 1e-30;  // tiny but positive
  Harness h("downpour", 2, so);
  // Coordinates 0 and 3 never see a gradient (a border pixel).
  const GradientFn q = h.q.Fn();
  for (auto& g : h.gradients) {
    g = [q](std::span<const float> p, std::span<float> out) {
      const float loss = q(p, out);
      out[0] = 0.0f;
      out[3] = 0.0f;
      return loss;
    };
  }
  h.Run(8);
  ASSERT_GT(h.store->version(), 0u);
  const auto got = h.store->values();
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(std::isfinite(got[i])) << i;
  EXPECT_EQ(got[0], kInit[0]);
  EXPECT_EQ(got[3], kInit[3]);
  EXPECT_NE(got[2], kInit[2]);  // a coordinate with a gradient moved
}

// DOWNPOUR: after a fetch a worker's parameters are the server's at that version (the
// fetch replaces the local copy; nothing of the local trajectory is kept). Push every 2
// steps, fetch every 3: the fetch at step 3 is a pull alone, the one at step 6 a push-pull.
TEST(Downpour, AfterAFetchTheWorkerHoldsTheServersParameters) {
  Harness h("downpour", 2, Options(0.1, 2, 3), "momentum");
  h.Start();
  auto step = [&](std::size_t w) {
    StepResult r = h.rules[w]->Step(h.envs[w]);
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  };
  // Worker 1 moves the centre first, so worker 0's fetch sees a centre it did not make.
  step(1);
  step(1);
  ASSERT_EQ(h.store->version(), 1u);
  step(0);
  step(0);                              // push at step 2 (version 2), no fetch
  EXPECT_NE(h.local(0), h.store->values());
  step(0);                              // fetch at step 3
  EXPECT_EQ(h.local(0), h.store->values());
  step(1);
  step(1);                              // worker 1 pushes again: version 3
  EXPECT_NE(h.local(0), h.store->values());
  step(0);
  step(0);
  step(0);                              // step 6: push and fetch, one push-pull
  EXPECT_EQ(h.local(0), h.store->values());
  EXPECT_EQ(h.store->version(), 5u);
}

// staleness_aware with 1 < c < λ (λ = 4 workers, softsync 2 → c = 2): each update is
// the mean of exactly c gradients, each scaled by α₀/(s + 1) with its own staleness.
TEST(StalenessAware, UpdateIsTheMeanOfCScaledGradientsWhenCIsBetweenOneAndLambda) {
  constexpr int kWorkers = 4;
  constexpr double kAlpha = 0.2;
  StrategyOptions so = Options(kAlpha, 1);
  so.settings.Set("softsync", 2);
  so.num_workers = kWorkers;
  ps::MemoryStalenessSink sink;
  MemoryStore store(kInit, FindStrategy("staleness_aware").server_rule(so, 0), nullptr, &sink);
  std::vector<std::unique_ptr<MemoryClient>> clients;
  std::vector<std::vector<float>> g(kWorkers, std::vector<float>(kDim));
  std::vector<float> theta(kDim);
  for (int w = 0; w < kWorkers; ++w) {
    clients.push_back(std::make_unique<MemoryClient>(&store, static_cast<uint32_t>(w)));
    ASSERT_TRUE(clients.back()->Pull(theta).ok());  // every worker reads version 0
    for (int i = 0; i < kDim; ++i) {
      g[static_cast<std::size_t>(w)][static_cast<std::size_t>(i)] =
          0.25f * static_cast<float>(w + 1) - 0.5f * static_cast<float>(i);
    }
  }
  ASSERT_TRUE(clients[0]->Push(g[0], 0).ok());
  EXPECT_EQ(store.version(), 0u) << "one gradient of c = 2 applies nothing";
  EXPECT_EQ(store.values(), kInit);
  ASSERT_TRUE(clients[1]->Push(g[1], 0).ok());
  ASSERT_EQ(store.version(), 1u);
  std::vector<float> want = kInit;
  const auto a = static_cast<float>(kAlpha);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] -= 0.5f * (a * g[0][i] + a * g[1][i]);
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(store.values()[i], want[i], 1e-6) << i;
  // Workers 2 and 3 read version 0 and push after one update: staleness 1, rate α₀/2.
  ASSERT_TRUE(clients[2]->Push(g[2], 0).ok());
  EXPECT_EQ(store.version(), 1u);
  ASSERT_TRUE(clients[3]->Push(g[3], 0).ok());
  ASSERT_EQ(store.version(), 2u);
  for (std::size_t i = 0; i < want.size(); ++i) {
    want[i] -= 0.5f * (0.5f * a * g[2][i] + 0.5f * a * g[3][i]);
  }
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(store.values()[i], want[i], 1e-6) << i;
  const auto records = sink.records();
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0].staleness, 0);
  EXPECT_EQ(records[1].staleness, 0);
  EXPECT_EQ(records[2].staleness, 1);
  EXPECT_EQ(records[3].staleness, 1);
}

// SAGN keeps the optimizer on the worker (its local steps are the algorithm). With
// backup workers (N = 1 of 2, one thread: worker 0 closes the round, worker 1's push is
// stale) the dropped window's update is lost and the worker continues from the new
// centre, but its optimizer state keeps the dropped window's gradient: the velocity is
// the one a momentum optimizer has after that step, not zero.
TEST(Sagn, ADroppedWindowKeepsTheWorkersOptimizerState) {
  StrategyOptions so = Options(0.1, 1);
  so.settings.Set("replicas_to_aggregate", 1);
  Harness h("sagn", 2, so, "momentum");
  h.Run(1);
  ASSERT_EQ(h.store->version(), 1u);
  ASSERT_EQ(h.clients[1]->dropped_pushes(), 1);
  EXPECT_EQ(h.local(1), h.store->values()) << "the dropped worker continues from the centre";
  std::vector<float> theta = kInit, g(kDim);
  h.q.Fn()(theta, g);
  auto ref = MakeOptimizer("momentum");
  ref->Step(theta, g, 0.1f);
  const std::vector<float> state = h.optimizers[1]->State();
  EXPECT_EQ(state, ref->State());
  EXPECT_NE(state, std::vector<float>(state.size(), 0.0f));
}

// AEASGD (Zhang et al. 2015, Alg. 1): every τ steps (from t = 0) the worker exchanges with
// the centre at its current parameters x, before its local step: E = α(x − x̃), x̃ ← x̃ + E,
// x ← x − E, then x ← x − η·g(x) with the gradient taken before the exchange. The default
// α is the paper's β/p with β = 0.9. Two workers stepped in turn against a hand-written
// replay of that loop.
TEST(Aeasgd, ExchangeEveryTauStepsAtTheCurrentParametersBeforeTheLocalStep) {
  StrategyOptions defaults;
  defaults.num_workers = 4;
  EXPECT_DOUBLE_EQ(ElasticAlpha(defaults), 0.9 / 4);
  constexpr int kWorkers = 2, kTau = 3, kSteps = 10;
  constexpr float kLr = 0.1f, kAlpha = 0.3f;
  StrategyOptions so = Options(kLr, kTau);
  so.settings.Set("elastic_alpha", kAlpha);
  Harness h("aeasgd", kWorkers, so);
  h.Run(kSteps);
  std::vector<std::vector<float>> x(kWorkers, kInit);
  std::vector<float> centre = kInit, g(kDim);
  const GradientFn fn = h.q.Fn();
  for (int t = 0; t < kSteps; ++t) {
    for (auto& xw : x) {
      fn(xw, g);
      if (t % kTau == 0) {
        for (std::size_t i = 0; i < xw.size(); ++i) {
          const float e = kAlpha * (xw[i] - centre[i]);
          centre[i] += e;
          xw[i] -= e;
        }
      }
      for (std::size_t i = 0; i < xw.size(); ++i) xw[i] -= kLr * g[i];
    }
  }
  const auto got = h.store->values();
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], centre[i], 1e-5) << i;
  for (std::size_t w = 0; w < x.size(); ++w) {
    const auto local = h.local(w);
    for (std::size_t i = 0; i < local.size(); ++i) EXPECT_NEAR(local[i], x[w][i], 1e-5) << w << " " << i;
  }
  EXPECT_EQ(h.store->version(), static_cast<uint64_t>(kWorkers * ((kSteps + kTau - 1) / kTau)));
}

}  // namespace
}  // namespace asgd::algorithms
