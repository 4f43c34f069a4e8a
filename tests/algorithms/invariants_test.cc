// The invariants of docs/algorithms.md#equivalences-and-invariants for the synchronous, elastic,
// delay-aware and
// averaging strategies, on the in-memory store: bit for bit where the arithmetic is the
// same, to float tolerance where only the order of a sum differs. Synchronous rules block
// workers in rounds, so those tests run one thread per worker; their results do not
// depend on the threads' timing (a round sums its pushes in worker order), which the
// tests rely on.
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/elastic.h"
#include "algorithms/schedule.h"
#include "core/error.h"
#include "tests/algorithms/strategy_harness.h"

namespace asgd::algorithms {
namespace {

using namespace ::asgd::algorithms::testing;  // NOLINT: the fixtures of this suite

// ---- Least squares with per-worker batches: sync SGD ≡ large-batch SGD ---------------

// m examples a_i ∈ R^kDim, targets y_i; the mean-squared loss of a batch and its gradient
// (1/|B|) Σ a_i (a_i·θ − y_i). Example j of the data is a fixed function of j.
struct LeastSquares {
  int m;
  explicit LeastSquares(int examples) : m(examples) {}
  float a(int j, int i) const {
    return std::sin(0.7f * static_cast<float>(j) + 1.3f * static_cast<float>(i));
  }
  float y(int j) const { return std::cos(0.3f * static_cast<float>(j)); }
  // Loss and gradient at p over examples first, first + 1, ..., first + count − 1 (mod m).
  float Batch(std::span<const float> p, std::span<float> g, int first, int count) const {
    std::fill(g.begin(), g.end(), 0.0f);
    float loss = 0;
    for (int k = 0; k < count; ++k) {
      const int j = (first + k) % m;
      float r = -y(j);
      for (int i = 0; i < kDim; ++i) r += a(j, i) * p[static_cast<std::size_t>(i)];
      for (int i = 0; i < kDim; ++i)
        g[static_cast<std::size_t>(i)] += a(j, i) * r / static_cast<float>(count);
      loss += 0.5f * r * r / static_cast<float>(count);
    }
    return loss;
  }
};

// Worker w of n, batch b: its t-th batch is examples [(t·n + w)·b, +b), so the n workers'
// t-th batches together are the sequential run's t-th batch of n·b.
GradientFn WorkerBatches(const LeastSquares& ls, int w, int n, int b) {
  auto t = std::make_shared<int>(0);
  return [&ls, w, n, b, t](std::span<const float> p, std::span<float> g) {
    return ls.Batch(p, g, ((*t)++ * n + w) * b, b);
  };
}

std::vector<float> LargeBatchSgd(const LeastSquares& ls, double lr, int batch, int steps) {
  std::vector<float> theta = kInit, g(kDim);
  auto o = MakeOptimizer("sgd");
  for (int t = 0; t < steps; ++t) {
    ls.Batch(theta, g, t * batch, batch);
    o->Step(theta, g, static_cast<float>(lr));
  }
  return theta;
}

// sync_sgd: k workers of batch b with mean aggregation ≡ one worker of batch k·b, up to
// the order of the float sums; every round is one version, every push fresh.
TEST(SyncSgd, KWorkersOfBatchBAreOneWorkerOfBatchKB) {
  const LeastSquares ls(64);
  constexpr int kWorkers = 4, kBatch = 3, kSteps = 30;
  Harness h("sync_sgd", kWorkers, Options(0.2, 1));
  for (int w = 0; w < kWorkers; ++w)
    h.gradients[static_cast<std::size_t>(w)] = WorkerBatches(ls, w, kWorkers, kBatch);
  h.RunThreads(kSteps);
  ExpectNear(h.store->values(), LargeBatchSgd(ls, 0.2, kWorkers * kBatch, kSteps), 1e-5, "centre");
  EXPECT_EQ(h.store->version(), static_cast<uint64_t>(kSteps));
  const auto stats = h.store->stats();
  EXPECT_EQ(stats.pushes_accepted, static_cast<uint64_t>(kWorkers * kSteps));
  EXPECT_EQ(stats.pushes_dropped, 0u);
  for (const auto& r : h.sink.records()) EXPECT_EQ(r.staleness, 0);
  // Every worker continues from the centre the round produced.
  for (std::size_t w = 0; w < h.size(); ++w) EXPECT_EQ(h.local(w), h.store->values()) << w;
}

// sync_sgd: sum aggregation ≡ mean aggregation with the rate × N.
TEST(SyncSgd, SumAggregationIsMeanWithTheRateTimesN) {
  const LeastSquares ls(64);
  constexpr int kWorkers = 4;
  StrategyOptions sum = Options(0.05, 1);
  sum.settings.Set("aggregation", "sum");
  Harness a("sync_sgd", kWorkers, sum);
  Harness b("sync_sgd", kWorkers, Options(0.2, 1));
  for (int w = 0; w < kWorkers; ++w) {
    a.gradients[static_cast<std::size_t>(w)] = WorkerBatches(ls, w, kWorkers, 2);
    b.gradients[static_cast<std::size_t>(w)] = WorkerBatches(ls, w, kWorkers, 2);
  }
  a.RunThreads(20);
  b.RunThreads(20);
  ExpectNear(a.store->values(), b.store->values(), 1e-5, "sum vs mean×N");
  StrategyOptions bad = sum;
  bad.settings.Set("aggregation", "median");
  EXPECT_THROW(FindStrategy("sync_sgd").server_rule(bad, 0), ConfigError);
}

// sync_sgd: per-worker rates η_k (TFG's "different learning rates"): a round applies
// −(1/N) Σ η_k g_k; all workers read the same θ, so on the quadratic g_k = g.
TEST(SyncSgd, PerWorkerLearningRatesScaleEachGradient) {
  constexpr int kWorkers = 2;
  Harness h("sync_sgd", kWorkers, Options(1.0, 1));
  h.envs[0].options.learning_rate = 0.1;
  h.envs[1].options.learning_rate = 1e-4;
  h.RunThreads(1);
  std::vector<float> g(kDim);
  h.q.Fn()(kInit, g);
  const auto got = h.store->values();
  for (int i = 0; i < kDim; ++i) {
    const float u0 = -0.1f * g[static_cast<std::size_t>(i)];
    const float u1 = -1e-4f * g[static_cast<std::size_t>(i)];
    EXPECT_FLOAT_EQ(got[static_cast<std::size_t>(i)],
                    kInit[static_cast<std::size_t>(i)] + 0.5f * (u0 + u1))
        << i;
  }
}

// sync_sgd: M = 4 workers, N = 3. Worker 3 is made the slowest of every round (it
// computes only once the round it read for has closed, and the others wait for its push
// before starting the next round), so every push of it is dropped as stale: exactly one
// per round. The centre is then 3-worker synchronous SGD of the others, bit for bit.
TEST(SyncSgd, BackupWorkersDropTheSlowestPushOfEveryRound) {
  const LeastSquares ls(64);
  constexpr int kRounds = 12;
  StrategyOptions so = Options(0.1, 1);
  so.settings.Set("replicas_to_aggregate", 3);
  Harness h("sync_sgd", 4, so);
  Harness ref("sync_sgd", 3, Options(0.1, 1));
  MemoryStore* store = h.store.get();
  // Set once worker 3 has read its starting point: no round may close before that.
  auto slow_started = std::make_shared<std::atomic<bool>>(false);
  for (int w = 0; w < 3; ++w) {
    const GradientFn batches = WorkerBatches(ls, w, 3, 2);
    auto round = std::make_shared<uint64_t>(0);
    h.gradients[static_cast<std::size_t>(w)] = [store, batches, round, slow_started](
                                                   std::span<const float> p, std::span<float> g) {
      while (!slow_started->load() || store->stats().pushes_dropped < (*round))
        std::this_thread::yield();
      ++*round;
      return batches(p, g);
    };
    ref.gradients[static_cast<std::size_t>(w)] = WorkerBatches(ls, w, 3, 2);
  }
  MemoryClient* slow = h.clients[3].get();
  const GradientFn quadratic = h.q.Fn();
  h.gradients[3] = [store, slow, quadratic, slow_started](std::span<const float> p,
                                                          std::span<float> g) {
    slow_started->store(true);
    while (store->version() <= slow->pulled_version()) std::this_thread::yield();
    return quadratic(p, g);
  };
  h.RunThreads(kRounds);
  ref.RunThreads(kRounds);
  const auto stats = h.store->stats();
  EXPECT_EQ(h.store->version(), static_cast<uint64_t>(kRounds));
  EXPECT_EQ(stats.pushes_dropped, static_cast<uint64_t>(kRounds));
  EXPECT_EQ(stats.pushes_accepted, static_cast<uint64_t>(3 * kRounds));
  EXPECT_EQ(h.clients[3]->dropped_pushes(), kRounds);
  for (int w = 0; w < 3; ++w)
    EXPECT_EQ(h.clients[static_cast<std::size_t>(w)]->dropped_pushes(), 0);
  // Every push has its record; the dropped ones are worker 3's, one round late.
  int64_t dropped_records = 0;
  for (const auto& r : h.sink.records()) {
    if (r.dropped()) {
      ++dropped_records;
      EXPECT_EQ(r.worker, 3u);
      EXPECT_EQ(r.staleness, 1);
    } else {
      EXPECT_EQ(r.staleness, 0);
      EXPECT_NE(r.worker, 3u);
    }
    EXPECT_EQ(r.oldest_version(), r.pulled_version);
  }
  EXPECT_EQ(dropped_records, h.clients[3]->dropped_pushes());
  EXPECT_EQ(h.store->values(), ref.store->values());
}

// sagn: SAGN(W = 1) ≡ sync SGD (up to rounding: SAGN averages the workers'
// updates −η·g_k, sync_sgd's server steps −η on the averaged gradient), and SAGN with one
// worker ≡ AGN, bit for bit.
TEST(Sagn, WindowOneIsSyncSgdAndOneWorkerIsAgn) {
  std::vector<std::unique_ptr<Quadratic>> data;  // per-worker data
  Harness sagn("sagn", 3, Options(0.1, 1));
  Harness sync("sync_sgd", 3, Options(0.1, 1));
  for (int w = 0; w < 3; ++w) {
    data.push_back(std::make_unique<Quadratic>(kDim, static_cast<float>(w)));
    sagn.gradients[static_cast<std::size_t>(w)] = data.back()->Fn();
    sync.gradients[static_cast<std::size_t>(w)] = data.back()->Fn();
  }
  sagn.RunThreads(15);
  sync.RunThreads(15);
  const auto a = sagn.store->values(), b = sync.store->values();
  for (int i = 0; i < kDim; ++i) EXPECT_NEAR(a[i], b[i], 1e-5f * (1.0f + std::fabs(b[i]))) << i;

  Harness one("sagn", 1, Options(0.1, 4), "momentum");
  Harness agn("agn", 1, Options(0.1, 4), "momentum");
  one.RunThreads(20);
  agn.Run(20);
  EXPECT_EQ(one.store->values(), agn.store->values());
  EXPECT_EQ(one.store->version(), 5u);
}

// SAGN pushes the window's update / W and a round applies their mean.
TEST(Sagn, RoundAppliesTheMeanOfWindowAverages) {
  Harness h("sagn", 2, Options(0.1, 2));
  h.gradients[1] = [](std::span<const float>, std::span<float> g) {
    std::fill(g.begin(), g.end(), 0.0f);  // worker 1 does not move
    return 0.0f;
  };
  h.RunThreads(2);
  // Worker 0's window: two SGD steps on the quadratic from kInit; push a/2, mean over 2.
  const auto two = Sequential(h.q, "sgd", 0.1, 2);
  const auto got = h.store->values();
  for (int i = 0; i < kDim; ++i) {
    const auto k = static_cast<std::size_t>(i);
    EXPECT_NEAR(got[k], kInit[k] + 0.25f * (two[k] - kInit[k]), 1e-6) << i;
  }
  EXPECT_EQ(h.store->version(), 1u);
}

// ---- SSP --------------------------------------------------------------------------

// ssp: SSP(S = 0) is BSP: every iteration all workers compute at the same θ and the
// sum of their updates is applied = sync SGD with sum aggregation, up to the sum's order.
TEST(Ssp, BoundZeroIsBsp) {
  const LeastSquares ls(64);
  StrategyOptions ssp = Options(0.05, 1);
  ssp.settings.Set("ssp_bound", 0);
  StrategyOptions bsp = Options(0.05, 1);
  bsp.settings.Set("aggregation", "sum");
  Harness a("ssp", 3, ssp);
  Harness b("sync_sgd", 3, bsp);
  for (int w = 0; w < 3; ++w) {
    a.gradients[static_cast<std::size_t>(w)] = WorkerBatches(ls, w, 3, 2);
    b.gradients[static_cast<std::size_t>(w)] = WorkerBatches(ls, w, 3, 2);
  }
  a.RunThreads(25);
  b.RunThreads(25);
  ExpectNear(a.store->values(), b.store->values(), 1e-5, "SSP(0) vs BSP");
  EXPECT_EQ(a.store->version(), 75u);  // SSP applies each push: one version each
  for (const auto& r : a.sink.records()) EXPECT_EQ(r.staleness, 0);
}

// ssp: no worker starts iteration c before every worker's updates from clocks
// ≤ c − S − 1 were applied, however slow one worker is; staleness (clocks ahead of the
// slowest) never exceeds S.
TEST(Ssp, NoWorkerRunsMoreThanSClocksAhead) {
  constexpr int kWorkers = 3, kBound = 2, kSteps = 30;
  StrategyOptions so = Options(0.01, 1);
  so.settings.Set("ssp_bound", kBound);
  Harness h("ssp", kWorkers, so);
  std::mutex mu;
  std::map<uint32_t, int> applied;  // pushes per worker in the store, from the records
  int violations = 0;
  const GradientFn quadratic = h.q.Fn();
  ps::MemoryStalenessSink* sink = &h.sink;
  for (int w = 0; w < kWorkers; ++w) {
    auto iteration = std::make_shared<int>(0);
    h.gradients[static_cast<std::size_t>(w)] = [&, w, iteration, quadratic, sink](
                                                   std::span<const float> p, std::span<float> g) {
      const int c = (*iteration)++;
      if (w == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));  // the straggler
      std::map<uint32_t, int> counts;
      for (const auto& r : sink->records()) ++counts[r.worker];
      std::lock_guard<std::mutex> lock(mu);
      for (int k = 0; k < kWorkers; ++k) {
        if (counts[static_cast<uint32_t>(k)] < c - kBound) ++violations;
      }
      return quadratic(p, g);
    };
  }
  h.RunThreads(kSteps);
  EXPECT_EQ(violations, 0);
  EXPECT_EQ(h.store->version(), static_cast<uint64_t>(kWorkers * kSteps));
  int64_t max_staleness = 0;
  for (const auto& r : h.sink.records()) max_staleness = std::max(max_staleness, r.staleness);
  EXPECT_LE(max_staleness, kBound);
  EXPECT_GT(max_staleness, 0) << "the straggler never held anyone back";
}

// ---- DC-ASGD ------------------------------------------------------------------------

// dc_asgd: λ = 0 is asynchronous SGD; one worker is SGD for any λ (w = w_bak).
TEST(DcAsgd, LambdaZeroIsAsyncSgdAndOneWorkerIsSgd) {
  StrategyOptions zero = Options(0.1, 1);
  zero.settings.Set("dc_lambda", 0.0);
  ExpectEquivalent("dc_asgd", zero, "async_sgd", Options(0.1, 1), 3, 10);

  StrategyOptions big = Options(0.1, 1);
  big.settings.Set("dc_lambda", 5.0);
  Harness one("dc_asgd", 1, big);
  one.Run(20);
  EXPECT_EQ(one.store->values(), Sequential(one.q, "sgd", 0.1, 20));
}

// The server applies w ← w − η(g + λ g⊙g⊙(w − w_bak)) with w_bak what the pushing worker
// last received; with delay 1 on f = ½hw² and λ = h/g², the compensated gradient is the
// gradient at the current w (exactly, in exact arithmetic), so closer than the raw one.
TEST(DcAsgd, CompensatesTheDelayedGradientTowardsTheCurrentOne) {
  constexpr double kEta = 0.1;
  const Quadratic q(kDim);
  std::vector<float> g0(kDim);
  q.Fn()(kInit, g0);
  const double lambda = q.h[0] / (g0[0] * g0[0]);  // exact for coordinate 0
  StrategyOptions so = Options(kEta, 1);
  so.settings.Set("dc_lambda", lambda);
  Harness h("dc_asgd", 2, so);
  h.Run(1);  // worker 0 pushes g(w0) at w0; worker 1 pushes g(w0) at w1 = w0 − ηg0
  const auto got = h.store->values();
  const double w0 = kInit[0], hh = h.q.h[0], c = h.q.c[0];
  const double g = hh * (w0 - c);
  const double w1 = static_cast<float>(w0 - kEta * g);
  const double expected = w1 - kEta * (g + lambda * g * g * (w1 - w0));
  EXPECT_NEAR(got[0], expected, 1e-5);
  const double true_g = hh * (w1 - c);
  const double compensated = g + lambda * g * g * (w1 - w0);
  EXPECT_LT(std::abs(compensated - true_g), std::abs(g - true_g) / 100);
  EXPECT_NEAR(got[0], w1 - kEta * true_g, 1e-5);
}

// ---- ADAG (distance) ---------------------------------------------------------------

// adag_distance: one worker (the centre never moves between its pull and push) and γ → ∞
// are AGN exactly; (e)1, 3: 0 < f ≤ 1, smaller where the centre moved further.
TEST(AdagDistance, OneWorkerOrHugeGammaIsAgnAndDampingIsInZeroOne) {
  ExpectEquivalent("adag_distance", Options(0.1, 3), "agn", Options(0.1, 3), 1, 12, "momentum");
  StrategyOptions huge = Options(0.1, 2);
  huge.settings.Set("adag_gamma", 1e30);
  ExpectEquivalent("adag_distance", huge, "agn", Options(0.1, 2), 3, 10);

  // Two workers, round robin, window 1: worker 1's push comes after worker 0's moved
  // the centre by D = Δ0, so it is applied as f ⊙ Δ1 with f = 1/(D²/γ + 1).
  StrategyOptions so = Options(0.1, 1);
  so.settings.Set("adag_gamma", 0.01);
  Harness h("adag_distance", 2, so);
  h.Run(1);
  std::vector<float> g(kDim);
  h.q.Fn()(kInit, g);
  const auto got = h.store->values();
  for (int i = 0; i < kDim; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const double delta = -0.1 * g[k];  // both workers computed at kInit
    const double f = 1.0 / (delta * delta / 0.01 + 1.0);
    EXPECT_GT(f, 0.0);
    EXPECT_LE(f, 1.0);
    EXPECT_NEAR(got[k], kInit[k] + delta + f * delta, 1e-5) << i;
  }
}

// ---- Staleness-aware ---------------------------------------------------------------

// staleness_aware: one learner with c = 1 is SGD exactly; with two learners updating on
// every gradient (2-softsync), the second gradient of each round (s = 1) gets α₀/2.
TEST(StalenessAware, RateIsAlphaOverStalenessPlusOne) {
  Harness one("staleness_aware", 1, Options(0.1, 1));
  one.Run(15);
  EXPECT_EQ(one.store->values(), Sequential(one.q, "sgd", 0.1, 15));

  Harness h("staleness_aware", 2, Options(0.1, 1));
  h.Run(1);
  std::vector<float> g(kDim);
  h.q.Fn()(kInit, g);
  const auto got = h.store->values();
  for (int i = 0; i < kDim; ++i) {
    const auto k = static_cast<std::size_t>(i);
    EXPECT_NEAR(got[k], kInit[k] - 0.1f * g[k] - 0.05f * g[k], 1e-6) << i;
  }
  const auto records = h.sink.records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].staleness, 0);
  EXPECT_EQ(records[1].staleness, 1);
}

// staleness_aware: 1-softsync (c = λ) with every gradient fresh is hardsync: synchronous SGD
// with mean aggregation and rate α₀. The rule is driven directly: in every round all
// learners read the same version, then push their gradients (the worker rule's push-pull
// answers before the update, so it cannot make every gradient fresh on its own).
TEST(StalenessAware, OneSoftsyncWithFreshGradientsIsSyncSgd) {
  constexpr int kWorkers = 3, kRounds = 10;
  StrategyOptions so = Options(0.2, 1);
  so.settings.Set("softsync", 1);
  so.num_workers = kWorkers;
  ps::MemoryStalenessSink sink;
  MemoryStore store(kInit, FindStrategy("staleness_aware").server_rule(so, 0), nullptr, &sink);
  std::vector<std::unique_ptr<MemoryClient>> clients;
  for (int w = 0; w < kWorkers; ++w) clients.push_back(std::make_unique<MemoryClient>(&store, w));
  std::vector<std::unique_ptr<Quadratic>> data;
  for (int w = 0; w < kWorkers; ++w)
    data.push_back(std::make_unique<Quadratic>(kDim, static_cast<float>(w)));
  std::vector<std::vector<float>> theta(kWorkers, std::vector<float>(kDim)), grad = theta;
  for (int r = 0; r < kRounds; ++r) {
    for (int w = 0; w < kWorkers; ++w)
      ASSERT_TRUE(
          clients[static_cast<std::size_t>(w)]->Pull(theta[static_cast<std::size_t>(w)]).ok());
    for (int w = 0; w < kWorkers; ++w) {
      const auto k = static_cast<std::size_t>(w);
      data[k]->Fn()(theta[k], grad[k]);
      ASSERT_TRUE(clients[k]->Push(grad[k], r).ok());
    }
  }
  Harness sync("sync_sgd", kWorkers, Options(0.2, 1));
  for (int w = 0; w < kWorkers; ++w)
    sync.gradients[static_cast<std::size_t>(w)] = data[static_cast<std::size_t>(w)]->Fn();
  sync.RunThreads(kRounds);
  ExpectNear(store.values(), sync.store->values(), 1e-6, "1-softsync vs sync SGD");
  EXPECT_EQ(store.version(), static_cast<uint64_t>(kRounds));
  for (const auto& rec : sink.records()) EXPECT_EQ(rec.staleness, 0);
}

// ---- Staleness under round-robin, for every asynchronous strategy -------------------

// downpour, staleness: with n workers stepped in turn, worker k's first push has staleness k
// and every later push n − 1.
TEST(Strategies, RoundRobinStalenessIsWorkersMinusOneForEveryAsyncStrategy) {
  for (const char* name : {"adag_distance", "aeasgd", "aeamsgd", "dc_asgd", "staleness_aware"}) {
    constexpr int kWorkers = 4;
    Harness h(name, kWorkers, Options(0.01, 1));
    h.Run(5);
    const auto records = h.sink.records();
    ASSERT_EQ(records.size(), static_cast<std::size_t>(kWorkers * 5)) << name;
    for (std::size_t i = 0; i < records.size(); ++i) {
      const int64_t expected = i < kWorkers ? static_cast<int64_t>(i) : kWorkers - 1;
      EXPECT_EQ(records[i].staleness, expected) << name << " push " << i;
    }
  }
}

// ---- Learning-rate schedule --------------------------------------------------------

// the schedule: the warmup is η at 0, k·η at its end, linear in between; decay per epoch.
TEST(Schedule, LinearScalingWithGradualWarmup) {
  ScheduleOptions o;
  o.scale = 8;
  o.warmup_epochs = 5;
  EXPECT_DOUBLE_EQ(LearningRateScale(o, 0), 1.0);
  EXPECT_DOUBLE_EQ(LearningRateScale(o, 2.5), 4.5);
  EXPECT_DOUBLE_EQ(LearningRateScale(o, 5), 8.0);
  EXPECT_DOUBLE_EQ(LearningRateScale(o, 7.5), 8.0);
  o.decay = 0.5;
  EXPECT_DOUBLE_EQ(LearningRateScale(o, 6.5), 8.0 / 64);
  ScheduleOptions plain;
  EXPECT_DOUBLE_EQ(LearningRateScale(plain, 3.7), 1.0);
  plain.decay = 0.9;
  EXPECT_DOUBLE_EQ(LearningRateScale(plain, 2.0), 0.81);
  plain.scale = 0.5;
  EXPECT_THROW(LearningRateScale(plain, 1.0), InvariantError);
}

}  // namespace
}  // namespace asgd::algorithms
