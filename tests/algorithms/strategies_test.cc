// The asynchronous strategies on the in-memory store under a deterministic round-robin
// schedule (one thread calls each worker's Step in turn), so staleness is exact and the
// invariants of docs/algorithms.md#equivalences-and-invariants hold bit for bit or to float
// tolerance.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/builtin_strategies.h"
#include "algorithms/hogwild.h"
#include "algorithms/memory_store.h"
#include "algorithms/strategy.h"
#include "core/error.h"
#include "core/rng.h"
#include "tests/algorithms/strategy_harness.h"

namespace asgd::algorithms {

using ps::Status;
namespace {

using namespace ::asgd::algorithms::testing;  // NOLINT: the fixtures of this suite

// docs/algorithms.md#equivalences-and-invariants: DOWNPOUR(W=1) ≡ AGN(W=1) ≡ DynSGD(n=1) ≡
// async_sgd(n=1) ≡ SGD, bit
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
// local trajectory (downpour), here bit for bit since the push is the exact sum of the
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

// agn: for the same local trajectory the AGN push is the DOWNPOUR push / W
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

// agn, the quadratic's closed form: one AGN worker with local SGD on a quadratic of curvature h:
// per window the error shrinks by 1 − (1 − (1 − ηh)^W)/W.
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

std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (float x : v) out.push_back(std::bit_cast<uint32_t>(x));
  return out;
}

// The window's bookkeeping rides on the optimizer's pass (windowed_worker.h: a assigned on
// a window's first step, scaled by 1/W on its last, θ not written before a fetch); the
// centre and θ must still be bit for bit the equations evaluated one pass at a time:
// a ← 0; per step θ ← θ + u, a ← a + u; after W steps a ← a·(1/W) (AGN, ADAG), centre ←
// centre + a; every n_fetch steps θ ← centre. One worker: DynSGD's damping and ADAG's
// distance factor are exactly 1, so every server rule is the add.
TEST(Strategies, WindowedWorkersAreTheirEquationsBitForBit) {
  struct Case {
    const char* name;
    int64_t window, fetch;
    const char* optimizer;
    bool normalise;
  };
  const Case cases[] = {{"agn", 5, 5, "sgd", true},
                        {"agn", 5, 5, "momentum", true},
                        {"adag_distance", 3, 3, "adagrad", true},
                        {"downpour", 3, 2, "nesterov", false},
                        {"dynsgd", 4, 4, "adam", false},
                        {"async_sgd", 1, 1, "momentum", false}};
  for (const Case& c : cases) {
    const float lr = 0.05f;
    Harness h(c.name, 1, Options(lr, c.window, c.fetch), c.optimizer);
    const Quadratic q(kDim);
    const GradientFn gradient = q.Fn();
    auto optimizer = MakeOptimizer(c.optimizer);
    std::vector<float> centre = kInit, theta = kInit, g(kDim), a(kDim, 0.0f);
    for (int t = 1; t <= 31; ++t) {
      h.Run(1);
      gradient(theta, g);
      optimizer->Step(theta, g, lr, a);
      if (t % c.window == 0) {
        if (c.normalise) {
          for (float& x : a) x *= 1.0f / static_cast<float>(c.window);
        }
        for (int i = 0; i < kDim; ++i) centre[i] += a[i];
        std::fill(a.begin(), a.end(), 0.0f);
      }
      if (t % c.fetch == 0) theta = centre;
      ASSERT_EQ(Bits(h.store->values()), Bits(centre))
          << c.name << " " << c.optimizer << " step " << t;
      ASSERT_EQ(Bits(h.local(0)), Bits(theta)) << c.name << " " << c.optimizer << " step " << t;
    }
  }
}

// downpour: under round-robin every push after the first round has staleness n − 1;
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

// dynsgd: DynSGD damps each push by exactly 1/(s + 1); with 2 workers round-robin
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

// DOWNPOUR with n_fetch < n_push: a push holds gradients computed on the parameters of
// several pulls. Round-robin, n workers, W = 4, a fetch every step: worker w's k-th push
// (k >= 2) arrives at version n(k−1) + w, its last pull read n(k−1) (staleness w), and its
// window's first gradient was computed on what its previous push-pull returned,
// n(k−2) + w + 1, so its oldest gradient is n − 1 updates old — what DOWNPOUR without the
// fetches inside the window reports as its staleness.
TEST(Strategies, DownpourFetchInsideTheWindowRecordsTheOldestVersion) {
  const int n = 3;
  const int kPushes = 4;
  Harness h("downpour", n, Options(0.01, 4, 1));
  h.Run(4 * kPushes);
  const auto records = h.sink.records();
  ASSERT_EQ(records.size(), static_cast<std::size_t>(n * kPushes));
  for (std::size_t i = 0; i < records.size(); ++i) {
    const ps::StalenessRecord& r = records[i];
    const auto w = static_cast<int64_t>(r.worker);
    const int64_t k = static_cast<int64_t>(i) / n + 1;
    SCOPED_TRACE("worker " + std::to_string(w) + " push " + std::to_string(k));
    EXPECT_EQ(r.applied_version, static_cast<uint64_t>(n * (k - 1) + w));
    EXPECT_EQ(r.pulled_version, static_cast<uint64_t>(n * (k - 1)));
    EXPECT_EQ(r.staleness, w);
    EXPECT_GE(r.oldest_staleness(), r.staleness);
    EXPECT_LE(r.oldest_version(), r.pulled_version);
    if (k == 1) {
      EXPECT_EQ(r.oldest_version(), 0u);  // every pull of the first window read version 0
      EXPECT_EQ(r.oldest_staleness(), w);
    } else {
      EXPECT_EQ(r.oldest_version(), static_cast<uint64_t>(n * (k - 2) + w + 1));
      EXPECT_EQ(r.oldest_staleness(), n - 1);
    }
  }
  // Without the fetches inside the window the push's staleness is the oldest one's.
  Harness plain("downpour", n, Options(0.01, 4, 4));
  plain.Run(4 * kPushes);
  const auto plain_records = plain.sink.records();
  ASSERT_EQ(plain_records.size(), records.size());
  for (std::size_t i = static_cast<std::size_t>(n); i < plain_records.size(); ++i) {
    EXPECT_EQ(plain_records[i].staleness, n - 1) << i;
    EXPECT_EQ(plain_records[i].oldest_staleness(), n - 1) << i;
  }
}

// Only a worker that pulls inside its push window computes one push on several versions:
// every strategy run with its fetches at its pushes (the default) records the two ends
// equal, dropped pushes included.
TEST(Strategies, OldestVersionIsThePulledOneWithoutFetchesInsideTheWindow) {
  for (const Strategy* s : Strategies()) {
    if (s->family == Family::kSequential || s->shared_memory || !s->server_rule) continue;
    SCOPED_TRACE(s->name);
    Harness h(s->name, 3, Options(0.01, 2));
    if (s->synchronous) {
      h.RunThreads(6);
    } else {
      h.Run(6);
    }
    const auto records = h.sink.records();
    EXPECT_FALSE(records.empty());
    for (const ps::StalenessRecord& r : records) {
      EXPECT_EQ(r.oldest_lag, 0u);
      EXPECT_EQ(r.oldest_version(), r.pulled_version);
      EXPECT_EQ(r.oldest_staleness(), r.staleness);
    }
  }
}

// DistBelief's server-side Adagrad, one push: θ̃ ← θ̃ − γ·g/√(A0 + g²).
TEST(Strategies, DownpourServerAdagradMatchesItsFormula) {
  StrategyOptions so = Options(0.01, 1);
  so.settings.Set("server_optimizer", "adagrad");
  so.settings.Set("server_learning_rate", 0.5);
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
  bad.settings.Set("server_optimizer", "rmsprop");
  EXPECT_THROW(FindStrategy("downpour").server_rule(bad, 0), ConfigError);
}

// The registry entries are complete and their traits consistent: a strategy with rounds or
// clocks is synchronous, every one reads the common keys, only the sequential baseline has
// no rules, and the strategies on a collective have no server rule.
TEST(Strategies, EveryEntryHasRulesAndConsistentTraits) {
  const std::vector<std::string> common = ReadKeys(kCommonKeys);
  int sequential = 0;
  for (const Strategy* s : Strategies()) {
    SCOPED_TRACE(s->name);
    EXPECT_FALSE(s->description.empty());
    EXPECT_EQ(&FindStrategy(s->name), s);
    for (const std::string& k : common) {
      EXPECT_TRUE(std::binary_search(s->keys.begin(), s->keys.end(), k)) << k;
    }
    EXPECT_TRUE(std::is_sorted(s->keys.begin(), s->keys.end()));
    if (s->rounds || s->clocks) {
      EXPECT_TRUE(s->synchronous);
    }
    if (s->family == Family::kSequential) {
      ++sequential;
      EXPECT_FALSE(s->worker_rule);
      continue;
    }
    StrategyOptions o = Options(0.1, 2);
    o.num_workers = 4;  // dpsgd refuses rings of 2 and 3
    EXPECT_NE(s->worker_rule(o), nullptr);
    if (s->family == Family::kGroup) {
      // No server: the workers agree at round boundaries, which every worker reaches.
      EXPECT_FALSE(s->server_rule);
      EXPECT_TRUE(s->synchronous);
      ASSERT_TRUE(s->steps_per_round);
      EXPECT_GE(s->steps_per_round(o), 1);
      continue;
    }
    EXPECT_FALSE(s->steps_per_round);
    EXPECT_NE(s->server_rule(o, 0), nullptr);
  }
  EXPECT_EQ(sequential, 1);
  EXPECT_EQ(FindStrategy("adag").name, "agn");  // an alias resolves to its strategy
}

// A strategy's own settings (Strategy::settings): the registry adds their keys to what the
// strategy reads, a shared setting is one declaration, and StrategyOptions holds each at
// its declared default until set.
TEST(Strategies, SettingsAreTheStrategysKeysWithTheirDefaults) {
  std::vector<std::string> seen;
  for (const Strategy* s : Strategies()) {
    SCOPED_TRACE(s->name);
    for (const Setting& setting : s->settings) {
      EXPECT_TRUE(std::binary_search(s->keys.begin(), s->keys.end(), "algorithm." + setting.name))
          << setting.name;
      ASSERT_NE(FindSetting(setting.name), nullptr);
      EXPECT_EQ(FindSetting(setting.name)->default_value, setting.default_value);
      const std::vector<std::string> readers = StrategiesWithSetting(setting.name);
      EXPECT_NE(std::find(readers.begin(), readers.end(), s->name), readers.end());
      EXPECT_FALSE(setting.help.empty()) << setting.name;
      seen.push_back(setting.name);
    }
  }
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  EXPECT_EQ(AllSettings().size(), seen.size());  // once each
  EXPECT_EQ(StrategiesWithSetting("elastic_alpha"),
            (std::vector<std::string>{"aeamsgd", "aeasgd", "easgd"}));

  StrategyOptions o;
  EXPECT_EQ(o.settings.Double("sign_momentum"), 0.0);
  EXPECT_EQ(o.settings.Int("ssp_bound"), 3);
  EXPECT_EQ(o.settings.String("server_optimizer"), "add");
  EXPECT_EQ(o.settings.Raw("adag_gamma"), "1e-4");
  o.settings.Set("sign_momentum", 0.9);
  o.settings.Set("ssp_bound", 0);
  o.settings.Set("elastic_alpha", 0.3f);  // a float reads back as the same double
  EXPECT_EQ(o.settings.Double("sign_momentum"), 0.9);
  EXPECT_EQ(o.settings.Int("ssp_bound"), 0);
  EXPECT_EQ(o.settings.Double("elastic_alpha"), static_cast<double>(0.3f));
  // A name no strategy declares, or the wrong type, is a bug in the caller.
  EXPECT_THROW(o.settings.Set("ssp_bund", 1), InvariantError);
  EXPECT_THROW((void)o.settings.Double("no_such_setting"), InvariantError);
  EXPECT_THROW((void)o.settings.Int("sign_momentum"), InvariantError);
}

TEST(Strategies, UnknownNameListsTheKnownOnes) {
  try {
    FindStrategy("easgdd");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("agn"), std::string::npos) << e.what();
  }
}

// The one list (builtin_strategies.h) is the registry: every line is registered under a
// name of its own, and nothing else is (but agn's alias, adag).
TEST(Strategies, TheRegistryIsTheBuiltinList) {
  std::vector<std::string> listed;
#define ASGD_LIST_STRATEGY(Name, file) listed.push_back(Name##Strategy().name);
  ASGD_BUILTIN_STRATEGIES(ASGD_LIST_STRATEGY)
#undef ASGD_LIST_STRATEGY
  std::sort(listed.begin(), listed.end());
  std::vector<std::string> registered;
  for (const Strategy* s : Strategies()) registered.push_back(s->name);
  EXPECT_EQ(registered, listed);
  EXPECT_EQ(FindStrategy("adag").name, "agn");
}

TEST(MemoryStore, RejectsNonFinitePushesAndKeepsValues) {
  MemoryStore store(kInit, ps::NewAddRule());
  MemoryClient c(&store, 0);
  std::vector<float> bad(kDim, 1.0f);
  bad[2] = std::nanf("");
  Status st = c.Push(bad, 0);
  EXPECT_EQ(st.error_code(), ps::ErrorCode::kNonFinite);
  EXPECT_EQ(store.values(), kInit);
  EXPECT_EQ(store.stats().rejected, 1u);
}

// hogwild: one Hogwild thread is SGD exactly; with several real threads nothing is
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
  ps::MemoryStalenessSink sink;
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
      for (int p = 0; p < kPushes; ++p)
        sum += static_cast<float>((static_cast<int>(i) + t + p) % 3 - 1);
    }
    ASSERT_EQ(got[i], sum) << i;
  }
  EXPECT_EQ(store.version(), static_cast<uint64_t>(kThreads * kPushes));
  EXPECT_EQ(sink.size(), static_cast<std::size_t>(kThreads * kPushes));
}

// algorithm.hogwild_add = racy: without concurrency its adds are the atomic mode's, bit for
// bit (dense and sparse), so only collisions between threads tell them apart
// (docs/algorithms.md#hogwild); an unknown mode is a config error naming the key.
TEST(Hogwild, RacyAddsEqualAtomicAddsWithoutConcurrency) {
  std::vector<float> init(257);
  for (std::size_t i = 0; i < init.size(); ++i) init[i] = 0.25f * static_cast<float>(i % 7);
  HogwildStore atomic(init, nullptr, nullptr, HogwildStore::AddMode::kAtomic);
  HogwildStore racy(init, nullptr, nullptr, HogwildStore::ParseAddMode("racy"));
  EXPECT_EQ(racy.mode(), HogwildStore::AddMode::kRacy);
  std::vector<float> update(init.size());
  for (int p = 0; p < 5; ++p) {
    for (std::size_t i = 0; i < update.size(); ++i) {
      update[i] = (i + static_cast<std::size_t>(p)) % 4 == 0
                      ? 0.0f
                      : 0.1f * static_cast<float>(p) - 0.013f * static_cast<float>(i);
    }
    EXPECT_EQ(atomic.Add(update), racy.Add(update));
  }
  const std::vector<int64_t> at = {0, 3, 100, 256};
  const std::vector<float> values = {1.5f, -2.0f, 0.0f, 3.25f};
  (void)atomic.AddAt(at, values);
  (void)racy.AddAt(at, values);
  EXPECT_EQ(atomic.values(), racy.values());
  EXPECT_EQ(atomic.version(), racy.version());
  EXPECT_THROW(HogwildStore::ParseAddMode("locked"), ConfigError);
}

// hogwild: disjoint supports (each worker's samples touch only its own coordinates):
// the result does not depend on the interleaving and equals the sequential result,
// exactly. Two sparse workers on a separable quadratic, one on coordinates {0, 2, 4}, the
// other on {1, 3, 5}: worker-after-worker, alternating, and on two real threads all end
// at each block's own sequential SGD, bit for bit.
TEST(Hogwild, DisjointSupportsAreOrderIndependentAndSequential) {
  constexpr int kSteps = 25;
  constexpr double kLr = 0.1;
  const Quadratic q(kDim);
  const std::vector<std::vector<int64_t>> support = {{0, 2, 4}, {1, 3, 5}};
  auto sparse = [&](int w) {
    return [&, w](const SparseReader& read, SparseUpdate* g, Status* st) {
      const std::vector<int64_t>& idx = support[static_cast<std::size_t>(w)];
      std::vector<float> params(kDim, 0.0f);
      *st = read(idx, params);
      g->indices = idx;
      g->values.clear();
      for (const int64_t i : idx) {
        const auto k = static_cast<std::size_t>(i);
        g->values.push_back(q.h[k] * (params[k] - q.c[k]));
      }
      return 0.0f;
    };
  };
  struct Worker {
    HogwildClient client;
    std::unique_ptr<Optimizer> opt;
    std::unique_ptr<WorkerRule> rule;
    WorkerEnv env;
  };
  // order: "serial" (worker 0's steps, then worker 1's), "alternate", "threads".
  auto run = [&](const std::string& order) {
    HogwildStore store(kInit, nullptr, nullptr);
    std::vector<std::unique_ptr<Worker>> workers;
    for (int w = 0; w < 2; ++w) {
      auto wk = std::unique_ptr<Worker>(
          new Worker{HogwildClient(&store, static_cast<uint32_t>(w)), MakeOptimizer("sgd"),
                     FindStrategy("hogwild").worker_rule(Options(kLr, 1)), WorkerEnv{}});
      wk->env.ps = &wk->client;
      wk->env.optimizer = wk->opt.get();
      wk->env.options = Options(kLr, 1).worker;
      wk->env.gradient = [](std::span<const float>, std::span<float>) -> float {
        ADD_FAILURE() << "the dense gradient was used";
        return 0.0f;
      };
      wk->env.sparse_gradient = sparse(w);
      EXPECT_TRUE(wk->rule->Start(wk->env).ok());
      workers.push_back(std::move(wk));
    }
    auto step = [&](int w) {
      Worker& wk = *workers[static_cast<std::size_t>(w)];
      EXPECT_TRUE(wk.rule->Step(wk.env).status.ok());
    };
    if (order == "serial") {
      for (int w = 0; w < 2; ++w) {
        for (int i = 0; i < kSteps; ++i) step(w);
      }
    } else if (order == "alternate") {
      for (int i = 0; i < kSteps; ++i) {
        step(1);
        step(0);
      }
    } else {
      std::thread a([&] {
        for (int i = 0; i < kSteps; ++i) step(0);
      });
      std::thread b([&] {
        for (int i = 0; i < kSteps; ++i) step(1);
      });
      a.join();
      b.join();
    }
    return store.values();
  };
  // The sequential result: each coordinate's own SGD (the quadratic is separable).
  const std::vector<float> want = Sequential(q, "sgd", kLr, kSteps);
  for (const char* order : {"serial", "alternate", "threads"}) {
    EXPECT_EQ(run(order), want) << order;
  }
}

// hogwild: on sparse data a Hogwild worker reads only the coordinates its batch touches and
// adds −η·g at those only; every other coordinate is never read or written.
TEST(Hogwild, SparseStepsTouchOnlyTheirCoordinates) {
  constexpr int kSize = 10;
  std::vector<float> init(kSize);
  for (int i = 0; i < kSize; ++i) init[static_cast<std::size_t>(i)] = static_cast<float>(i);
  ps::MemoryStalenessSink sink;
  HogwildStore store(init, nullptr, &sink);
  HogwildClient client(&store, 0);
  auto opt = MakeOptimizer("sgd");
  WorkerEnv env;
  env.ps = &client;
  env.optimizer = opt.get();
  env.options = Options(0.5, 1).worker;
  env.gradient = [](std::span<const float>, std::span<float>) -> float {
    ADD_FAILURE() << "the dense gradient was used";
    return 0.0f;
  };
  std::vector<float> seen(kSize, -1.0f);  // what the sparse gradient got to read
  env.sparse_gradient = [&](const SparseReader& read, SparseUpdate* g, Status* st) {
    const std::vector<int64_t> touched = {2, 7, 9};
    std::vector<float> params(kSize, -1.0f);
    *st = read(touched, params);
    seen = params;
    g->indices = touched;
    g->values = {1.0f, -2.0f, 4.0f};
    return 0.25f;
  };
  auto rule = FindStrategy("hogwild").worker_rule(Options(0.5, 1));
  ASSERT_TRUE(rule->Start(env).ok());
  StepResult r = rule->Step(env);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(r.loss, 0.25f);
  EXPECT_EQ(r.pushes, 1);
  for (int i = 0; i < kSize; ++i) {
    const bool touched = i == 2 || i == 7 || i == 9;
    EXPECT_EQ(seen[static_cast<std::size_t>(i)],
              touched ? init[static_cast<std::size_t>(i)] : -1.0f)
        << i;
  }
  const std::vector<float> want = {0, 1, 2 - 0.5f, 3, 4, 5, 6, 7 + 1.0f, 8, 9 - 2.0f};
  EXPECT_EQ(store.values(), want);
  EXPECT_EQ(store.version(), 1u);
  EXPECT_EQ(sink.size(), 1u);
  // A NaN never reaches the shared vector.
  env.sparse_gradient = [](const SparseReader&, SparseUpdate* g, Status*) {
    g->indices = {0};
    g->values = {std::nanf("")};
    return 0.0f;
  };
  r = rule->Step(env);
  EXPECT_EQ(r.status.error_code(), ps::ErrorCode::kNonFinite);
  EXPECT_EQ(store.values(), want);
}

}  // namespace
}  // namespace asgd::algorithms
