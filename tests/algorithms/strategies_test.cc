// The asynchronous strategies on the in-memory store under a deterministic round-robin
// schedule (one thread calls each worker's Step in turn), so staleness is exact and the
// invariants of algorithms.md §3 and §7 hold bit for bit or to float tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "algorithms/hogwild.h"
#include "algorithms/memory_store.h"
#include "algorithms/strategy.h"
#include "core/error.h"
#include "core/rng.h"

namespace asgd::algorithms {
namespace {

// f(θ) = ½ Σ h_i (θ_i − c_i)²: gradient h ⊙ (θ − c). Deterministic, no data.
struct Quadratic {
  std::vector<float> h, c;
  explicit Quadratic(int n) {
    for (int i = 0; i < n; ++i) {
      h.push_back(0.5f + 0.25f * static_cast<float>(i % 4));
      c.push_back(static_cast<float>(i) - 3.0f);
    }
  }
  GradientFn Fn() const {
    return [this](std::span<const float> p, std::span<float> g) {
      float loss = 0;
      for (std::size_t i = 0; i < p.size(); ++i) {
        const float d = p[i] - c[i];
        g[i] = h[i] * d;
        loss += 0.5f * h[i] * d * d;
      }
      return loss;
    };
  }
};

constexpr int kDim = 6;
const std::vector<float> kInit = {1.0f, -2.0f, 0.5f, 4.0f, 0.0f, 3.0f};

// The sequential reference: `steps` optimizer steps from kInit.
std::vector<float> Sequential(const Quadratic& q, const std::string& opt, double lr, int steps) {
  std::vector<float> theta = kInit, g(kDim);
  OptimizerOptions oo;
  oo.name = opt;
  auto o = NewOptimizer(oo, kDim);
  auto fn = q.Fn();
  for (int s = 0; s < steps; ++s) {
    fn(theta, g);
    o->Step(theta, g, static_cast<float>(lr));
  }
  return theta;
}

// n workers of one strategy against one MemoryStore, stepped round-robin.
struct Harness {
  Quadratic q{kDim};
  transport::MemoryStalenessSink sink;
  std::unique_ptr<MemoryStore> store;
  std::vector<std::unique_ptr<MemoryClient>> clients;
  std::vector<std::unique_ptr<Optimizer>> optimizers;
  std::vector<std::unique_ptr<WorkerRule>> rules;
  std::vector<WorkerEnv> envs;
  int64_t pushes = 0;

  Harness(const std::string& name, int workers, StrategyOptions so, const std::string& opt = "sgd") {
    const Strategy& s = FindStrategy(name);
    so.num_workers = workers;
    store = std::make_unique<MemoryStore>(kInit, s.server_rule(so, 0), nullptr, &sink);
    envs.resize(static_cast<std::size_t>(workers));
    for (int w = 0; w < workers; ++w) {
      clients.push_back(std::make_unique<MemoryClient>(store.get(), static_cast<uint32_t>(w)));
      OptimizerOptions oo;
      oo.name = opt;
      optimizers.push_back(NewOptimizer(oo, kDim));
      rules.push_back(s.worker_rule(so));
      WorkerEnv& e = envs[static_cast<std::size_t>(w)];
      e.worker = w;
      e.num_workers = workers;
      e.ps = clients.back().get();
      e.gradient = q.Fn();
      e.optimizer = optimizers.back().get();
      e.options = so.worker;
      EXPECT_TRUE(rules.back()->Start(e).ok());
    }
  }
  // `rounds` round-robin rounds of one Step per worker.
  void Run(int rounds) {
    for (int r = 0; r < rounds; ++r) {
      for (std::size_t w = 0; w < rules.size(); ++w) {
        StepResult res = rules[w]->Step(envs[w]);
        ASSERT_TRUE(res.status.ok()) << res.status.ToString();
        pushes += res.pushes;
      }
    }
  }
};

StrategyOptions Options(double lr, int64_t window, int64_t fetch = 0) {
  StrategyOptions o;
  o.worker.learning_rate = lr;
  o.worker.window = window;
  o.worker.fetch_window = fetch > 0 ? fetch : window;
  return o;
}

// algorithms.md §7.4: DOWNPOUR(W=1) ≡ AGN(W=1) ≡ DynSGD(n=1) ≡ async_sgd(n=1) ≡ SGD, bit
// for bit (the pushed update is the optimizer's own −η·g).
TEST(Strategies, OneWorkerWindowOneIsSequentialSgdExactly) {
  const Quadratic q(kDim);
  const std::vector<float> expected = Sequential(q, "sgd", 0.1, 25);
  for (const char* name : {"downpour", "agn", "adag", "dynsgd", "async_sgd"}) {
    Harness h(name, 1, Options(0.1, 1));
    h.Run(25);
    EXPECT_EQ(h.store->values(), expected) << name;
    EXPECT_EQ(h.store->version(), 25u) << name;
  }
}

// DOWNPOUR with one worker and any window, delta push: the centre follows the worker's
// local trajectory (§3.3 (e)2), here bit for bit since the push is the exact sum of the
// applied updates and the centre started where the worker did... up to the rounding of
// that sum, so compare to a tolerance.
TEST(Strategies, DownpourOneWorkerFollowsLocalTraining) {
  const Quadratic q(kDim);
  const std::vector<float> expected = Sequential(q, "momentum", 0.05, 12);
  Harness h("downpour", 1, Options(0.05, 4), "momentum");
  h.Run(12);
  const auto got = h.store->values();
  for (int i = 0; i < kDim; ++i) EXPECT_NEAR(got[i], expected[i], 1e-5) << i;
  EXPECT_EQ(h.store->version(), 3u);  // 12 steps / W = 4
}

// §3.4 (e)2: for the same local trajectory the AGN push is the DOWNPOUR push / W
// (W = 4 is a power of two, so exactly).
TEST(Strategies, AgnPushIsDownpourPushOverWindow) {
  Harness agn("agn", 1, Options(0.1, 4));
  Harness dp("downpour", 1, Options(0.1, 4));
  agn.Run(4);
  dp.Run(4);
  const auto a = agn.store->values(), d = dp.store->values();
  for (int i = 0; i < kDim; ++i) {
    // Exact up to the rounding of adding each push to kInit.
    EXPECT_NEAR((a[i] - kInit[i]) * 4.0f, d[i] - kInit[i], 1e-6f) << i;
    if (d[i] != kInit[i]) {
      EXPECT_NE(a[i], d[i]) << i;  // a moved, but by a quarter
    }
  }
}

// §1.4 / §3.4 (e)3: one AGN worker with local SGD on a quadratic of curvature h: per
// window the error shrinks by 1 − (1 − (1 − ηh)^W)/W.
TEST(Strategies, AgnMatchesItsClosedFormOnTheQuadratic) {
  const double eta = 0.1;
  const int window = 5, windows = 6;
  Harness h("agn", 1, Options(eta, window));
  h.Run(window * windows);
  const auto got = h.store->values();
  for (int i = 0; i < kDim; ++i) {
    const double hh = h.q.h[static_cast<std::size_t>(i)];
    const double factor = 1.0 - (1.0 - std::pow(1.0 - eta * hh, window)) / window;
    const double e0 = kInit[static_cast<std::size_t>(i)] - h.q.c[static_cast<std::size_t>(i)];
    const double expected = h.q.c[static_cast<std::size_t>(i)] + e0 * std::pow(factor, windows);
    EXPECT_NEAR(got[i], expected, 1e-5) << i;
  }
}

// §3.3 (e)6: under round-robin every push after the first round has staleness n − 1;
// in the first round worker k's push has staleness k.
TEST(Strategies, RoundRobinStalenessIsWorkersMinusOne) {
  for (const char* name : {"async_sgd", "agn", "downpour", "dynsgd"}) {
    const int n = 4;
    const bool windowed = std::string(name) != "async_sgd";  // async_sgd ignores the window
    Harness h(name, n, Options(0.01, 2));
    h.Run(windowed ? 2 * 5 : 5);  // 5 pushes per worker
    const auto records = h.sink.records();
    ASSERT_EQ(records.size(), static_cast<std::size_t>(n * 5)) << name;
    for (std::size_t i = 0; i < records.size(); ++i) {
      const int64_t expected = i < static_cast<std::size_t>(n) ? static_cast<int64_t>(i) : n - 1;
      EXPECT_EQ(records[i].staleness, expected) << name << " push " << i;
    }
  }
}

// §3.6 (e)3, 4: DynSGD damps each push by exactly 1/(s + 1); with 2 workers round-robin
// the later pushes are halved. The centre equals init + Σ Δ_j/(s_j + 1).
TEST(Strategies, DynSgdDampsByStalenessPlusOne) {
  Harness h("dynsgd", 2, Options(0.01, 1));
  h.Run(6);
  const auto records = h.sink.records();
  ASSERT_EQ(records.size(), 12u);
  for (std::size_t i = 2; i < records.size(); ++i) EXPECT_EQ(records[i].staleness, 1);
  // The first push of each round is worker 0's; with n = 2 every later push is damped by
  // 1/2, so the centre moved less than DOWNPOUR's undamped centre would from the same
  // start: compare the first step exactly.
  Harness one("dynsgd", 2, Options(0.01, 1));
  one.Run(1);  // worker 0 (s = 0, full), worker 1 (s = 1, halved)
  Harness base("downpour", 1, Options(0.01, 1));
  base.Run(1);  // the full push of worker 0 alone
  const auto after0 = base.store->values();
  const auto after1 = one.store->values();
  // Worker 1 computed its gradient at kInit (it pulled before worker 0 pushed), so its
  // push equals worker 0's: Δ = after0 − kInit, applied at half weight.
  for (int i = 0; i < kDim; ++i) {
    const float delta = after0[i] - kInit[i];
    EXPECT_FLOAT_EQ(after1[i], after0[i] + 0.5f * delta) << i;
  }
}

// Every push covers exactly W local steps; a partial window at the end is not pushed.
TEST(Strategies, PartialWindowIsDropped) {
  Harness h("agn", 1, Options(0.01, 3));
  h.Run(7);
  EXPECT_EQ(h.pushes, 2);
  EXPECT_EQ(h.store->version(), 2u);
}

// DOWNPOUR with fetch every step and push every 3: the worker's θ is the centre after
// each fetch, and pushes still carry 3 steps of updates.
TEST(Strategies, DownpourFetchWindowIsIndependentOfThePushWindow) {
  Harness h("downpour", 1, Options(0.01, 3, 1));
  h.Run(6);
  EXPECT_EQ(h.pushes, 2);
  EXPECT_EQ(h.store->version(), 2u);
}

// DistBelief's server-side Adagrad, one push: θ̃ ← θ̃ − γ·g/√(A0 + g²).
TEST(Strategies, DownpourServerAdagradMatchesItsFormula) {
  StrategyOptions so = Options(0.01, 1);
  so.server_optimizer = "adagrad";
  so.server_learning_rate = 0.5;
  so.server_initial_accumulator = 0.1;
  Harness h("downpour", 1, so);
  h.Run(1);
  const auto got = h.store->values();
  for (int i = 0; i < kDim; ++i) {
    const float g = h.q.h[static_cast<std::size_t>(i)] *
                    (kInit[static_cast<std::size_t>(i)] - h.q.c[static_cast<std::size_t>(i)]);
    EXPECT_FLOAT_EQ(got[i], kInit[static_cast<std::size_t>(i)] - 0.5f * g / std::sqrt(0.1f + g * g))
        << i;
  }
  StrategyOptions bad = so;
  bad.server_optimizer = "rmsprop";
  EXPECT_THROW(FindStrategy("downpour").server_rule(bad, 0), ConfigError);
}

TEST(Strategies, UnknownNameListsTheKnownOnes) {
  try {
    FindStrategy("easgdd");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("agn"), std::string::npos) << e.what();
  }
}

TEST(MemoryStore, RejectsNonFinitePushesAndKeepsValues) {
  MemoryStore store(kInit, transport::NewAddRule());
  MemoryClient c(&store, 0);
  std::vector<float> bad(kDim, 1.0f);
  bad[2] = std::nanf("");
  Status st = c.Push(bad, 0);
  EXPECT_EQ(st.error_code(), transport::ErrorCode::kNonFinite);
  EXPECT_EQ(store.values(), kInit);
  EXPECT_EQ(store.stats().rejected, 1u);
}

// §3.2 (e)1, 3: one Hogwild thread is SGD exactly; with several real threads nothing is
// lost (integer updates make the float sum exact whatever the order).
TEST(Hogwild, OneThreadIsSgdAndThreadsLoseNothing) {
  const Quadratic q(kDim);
  const std::vector<float> expected = Sequential(q, "sgd", 0.1, 20);
  {
    HogwildStore store(kInit, nullptr, nullptr);
    HogwildClient client(&store, 0);
    auto rule = FindStrategy("hogwild").worker_rule(Options(0.1, 1));
    OptimizerOptions oo;
    auto opt = NewOptimizer(oo, kDim);
    WorkerEnv env;
    env.ps = &client;
    env.gradient = q.Fn();
    env.optimizer = opt.get();
    env.options = Options(0.1, 1).worker;
    ASSERT_TRUE(rule->Start(env).ok());
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(rule->Step(env).status.ok());
    EXPECT_EQ(store.values(), expected);
  }
  constexpr int kThreads = 4, kPushes = 2000;
  std::vector<float> init(1000, 0.0f);
  transport::MemoryStalenessSink sink;
  HogwildStore store(init, nullptr, &sink);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      HogwildClient c(&store, static_cast<uint32_t>(t));
      std::vector<float> buf(1000), update(1000);
      for (int p = 0; p < kPushes; ++p) {
        (void)c.Pull(buf);
        for (std::size_t i = 0; i < update.size(); ++i) {
          update[i] = static_cast<float>((static_cast<int>(i) + t + p) % 3 - 1);
        }
        (void)c.Push(update, p);
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto got = store.values();
  for (std::size_t i = 0; i < got.size(); ++i) {
    float sum = 0;
    for (int t = 0; t < kThreads; ++t) {
      for (int p = 0; p < kPushes; ++p) sum += static_cast<float>((static_cast<int>(i) + t + p) % 3 - 1);
    }
    ASSERT_EQ(got[i], sum) << i;
  }
  EXPECT_EQ(store.version(), static_cast<uint64_t>(kThreads * kPushes));
  EXPECT_EQ(sink.size(), static_cast<std::size_t>(kThreads * kPushes));
}

}  // namespace
}  // namespace asgd::algorithms
