// Test fixtures for the strategies (docs/algorithms.md#equivalences-and-invariants): a quadratic
// with a closed-form
// gradient, n workers of one strategy against one MemoryStore, and two schedulers: a
// deterministic round-robin (one thread steps every worker in turn, so staleness is
// exact) and one thread per worker (for the synchronous strategies, whose rounds block
// until every worker pushed).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/memory_store.h"
#include "algorithms/optimizer.h"
#include "algorithms/strategy.h"
#include "ps/compressing_client.h"
#include "ps/staleness.h"

namespace asgd::algorithms::testing {

// f(θ) = ½ Σ h_i (θ_i − c_i)²: gradient h ⊙ (θ − c). Deterministic, no data.
struct Quadratic {
  std::vector<float> h, c;
  explicit Quadratic(int n, float shift = 0.0f) {
    for (int i = 0; i < n; ++i) {
      h.push_back(0.5f + 0.25f * static_cast<float>(i % 4));
      c.push_back(static_cast<float>(i) - 3.0f + shift);
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

inline constexpr int kDim = 6;
inline const std::vector<float> kInit = {1.0f, -2.0f, 0.5f, 4.0f, 0.0f, 3.0f};

inline std::unique_ptr<Optimizer> MakeOptimizer(const std::string& name, double momentum = 0.9) {
  OptimizerOptions oo;
  oo.name = name;
  oo.momentum = momentum;
  return NewOptimizer(oo, kDim);
}

// The sequential reference: `steps` optimizer steps from kInit on q.
inline std::vector<float> Sequential(const Quadratic& q, const std::string& opt, double lr,
                                     int steps) {
  std::vector<float> theta = kInit, g(kDim);
  auto o = MakeOptimizer(opt);
  auto fn = q.Fn();
  for (int s = 0; s < steps; ++s) {
    fn(theta, g);
    o->Step(theta, g, static_cast<float>(lr));
  }
  return theta;
}

inline StrategyOptions Options(double lr, int64_t window, int64_t fetch = 0) {
  StrategyOptions o;
  o.worker.learning_rate = lr;
  o.worker.window = window;
  o.worker.fetch_window = fetch > 0 ? fetch : window;
  return o;
}

// The run seed the harness derives its workers' rule seeds from, as the runner does.
inline constexpr uint64_t kRunSeed = 42;

// Worker w's environment (of `workers`) with its client and optimizer, not owned; the
// gradient is the caller's to set. The rule's seed is WorkerRuleSeed(kRunSeed, w), as the
// runner's.
inline WorkerEnv MakeEnv(int w, int workers, ps::ParamClient* ps, Optimizer* optimizer,
                         const StrategyOptions& so) {
  WorkerEnv e;
  e.worker = w;
  e.num_workers = workers;
  e.seed = WorkerRuleSeed(kRunSeed, w);
  e.ps = ps;
  e.optimizer = optimizer;
  e.options = so.worker;
  return e;
}

// n workers of one strategy against one MemoryStore. Every worker uses q's gradient
// unless gradients[w] is set before Start().
struct Harness {
  Quadratic q{kDim};
  ps::MemoryStalenessSink sink;
  std::unique_ptr<MemoryStore> store;
  std::vector<std::unique_ptr<MemoryClient>> clients;
  std::vector<std::unique_ptr<Optimizer>> optimizers;
  std::vector<std::unique_ptr<WorkerRule>> rules;
  std::vector<WorkerEnv> envs;
  std::vector<GradientFn> gradients;  // per worker; empty = q's
  std::vector<std::unique_ptr<ps::CompressingClient>> compressing;  // CompressPushes()
  std::atomic<int64_t> pushes{0};

  // `rule`, when given, replaces the strategy's server rule (a setting the options cannot
  // express, e.g. an elastic α of exactly 0).
  Harness(const std::string& name, int workers, StrategyOptions so, const std::string& opt = "sgd",
          std::vector<float> init = kInit, std::unique_ptr<ps::ServerRule> rule = nullptr) {
    const Strategy& s = FindStrategy(name);
    so.num_workers = workers;
    if (rule == nullptr) rule = s.server_rule(so, 0);
    store = std::make_unique<MemoryStore>(std::move(init), std::move(rule), nullptr, &sink);
    envs.resize(static_cast<std::size_t>(workers));
    gradients.resize(static_cast<std::size_t>(workers));
    for (int w = 0; w < workers; ++w) {
      clients.push_back(std::make_unique<MemoryClient>(store.get(), static_cast<uint32_t>(w)));
      optimizers.push_back(MakeOptimizer(opt));
      rules.push_back(s.worker_rule(so));
      envs[static_cast<std::size_t>(w)] =
          MakeEnv(w, workers, clients.back().get(), optimizers.back().get(), so);
    }
    started_ = false;
  }
  std::size_t size() const { return rules.size(); }

  // Every worker's pushes go through a CompressingClient (seeded by worker). Before Start.
  void CompressPushes(const compression::CompressionOptions& o) {
    std::shared_ptr<const compression::Compressor> c = compression::NewCompressor(o);
    for (std::size_t w = 0; w < clients.size(); ++w) {
      compressing.push_back(
          std::make_unique<ps::CompressingClient>(clients[w].get(), c, o.error_feedback, w + 1));
      envs[w].ps = compressing.back().get();
    }
  }

  // Pulls for every worker (in worker order). Called by the Run* methods if needed.
  void Start() {
    if (started_) return;
    started_ = true;
    for (std::size_t w = 0; w < rules.size(); ++w) {
      envs[w].gradient = gradients[w] ? gradients[w] : q.Fn();
      ASSERT_TRUE(rules[w]->Start(envs[w]).ok());
    }
  }
  // `rounds` round-robin rounds of one Step per worker, on this thread.
  void Run(int rounds) {
    Start();
    for (int r = 0; r < rounds; ++r) {
      for (std::size_t w = 0; w < rules.size(); ++w) {
        StepResult res = rules[w]->Step(envs[w]);
        ASSERT_TRUE(res.status.ok()) << res.status.ToString();
        pushes += res.pushes;
      }
    }
  }
  // One thread per worker, each taking `steps` Steps (for rules that block in rounds).
  // Each worker's Start runs on its thread too (a rule may hold first reads until every
  // worker made one). With stop_at_version > 0, the store is shut down once it reached
  // that version and the workers end on the shutdown (the rest of their steps are not
  // taken).
  void RunThreads(int steps, uint64_t stop_at_version = 0) {
    const bool start = !started_;
    started_ = true;
    std::atomic<int> done{0};
    std::vector<std::thread> threads;
    for (std::size_t w = 0; w < rules.size(); ++w) {
      threads.emplace_back([&, w] {
        if (start) {
          envs[w].gradient = gradients[w] ? gradients[w] : q.Fn();
          const ps::Status st = rules[w]->Start(envs[w]);
          EXPECT_TRUE(st.ok()) << "worker " << w << ": " << st.ToString();
        }
        for (int i = 0; i < steps; ++i) {
          StepResult res = rules[w]->Step(envs[w]);
          if (res.status.error_code() == ps::ErrorCode::kShuttingDown) break;
          EXPECT_TRUE(res.status.ok()) << "worker " << w << ": " << res.status.ToString();
          if (!res.status.ok()) break;
          pushes += res.pushes;
        }
        ++done;
      });
    }
    if (stop_at_version > 0) {
      while (store->version() < stop_at_version && done.load() < static_cast<int>(size())) {
        std::this_thread::yield();
      }
      store->Shutdown();
    }
    for (auto& t : threads) t.join();
  }
  std::vector<float> local(std::size_t w) const {
    auto l = rules[w]->local_params();
    return {l.begin(), l.end()};
  }

 private:
  bool started_ = false;
};

// The registered strategies (aliases left out) whose traits pass `keep`, by name: the
// tests that must cover every strategy iterate the registry, so a new one is covered.
inline std::vector<std::string> StrategiesWhere(const std::function<bool(const Strategy&)>& keep) {
  std::vector<std::string> names;
  for (const Strategy* s : Strategies()) {
    if (keep(*s)) names.push_back(s->name);
  }
  return names;
}

// got equals want within rel, relative to max(1, |want[i]|), element by element.
inline void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double rel,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], rel * std::max(1.0f, std::abs(want[i])))
        << what << " [" << i << "]";
  }
}

// Strategy a and strategy b, with the same workers stepped round-robin, end with the same
// centre and the same local parameters, bit for bit.
inline void ExpectEquivalent(const std::string& a, const StrategyOptions& a_options,
                             const std::string& b, const StrategyOptions& b_options, int workers,
                             int rounds, const std::string& optimizer = "sgd") {
  SCOPED_TRACE(a + " vs " + b);
  Harness ha(a, workers, a_options, optimizer);
  Harness hb(b, workers, b_options, optimizer);
  ha.Run(rounds);
  hb.Run(rounds);
  EXPECT_EQ(ha.store->values(), hb.store->values());
  for (std::size_t w = 0; w < ha.size(); ++w) EXPECT_EQ(ha.local(w), hb.local(w)) << w;
}

}  // namespace asgd::algorithms::testing
