// The strategies on a collective (allreduce_sgd, local_sgd, dpsgd) with N ranks as
// threads over gloo's TCP transport on 127.0.0.1: the invariants their papers state,
// on the quadratic of strategy_harness.h with a different centre per worker (so the
// workers' gradients differ).
#include <cmath>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/optimizer.h"
#include "algorithms/strategy.h"
#include "collective/collective.h"
#include "core/error.h"
#include "tests/algorithms/strategy_harness.h"
#include "tests/collective/run_ranks.h"

namespace asgd::algorithms {
namespace {

using collective::Algorithm;
using collective::Collective;
using collective::testing::RunRanks;
using testing::Harness;
using testing::kDim;
using testing::kInit;
using testing::Quadratic;

// Float reassociation: sync_sgd sums the gradients in worker order, gloo's ring in segment
// order around the ring; local_sgd averages θ − ηg_i where allreduce_sgd averages g_i.
// Over a few steps of values of order 1..10 the results agree to a few float32 ulps; the
// tests allow 1e-5 relative (about 80 ulps).
constexpr double kRelativeTolerance = 1e-5;

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], kRelativeTolerance * std::max(1.0, std::abs(double{want[i]})))
        << what << ", element " << i;
  }
}

// Worker w's gradient: the quadratic centred at c + w.
std::vector<Quadratic> WorkerObjectives(int workers) {
  std::vector<Quadratic> q;
  for (int w = 0; w < workers; ++w) q.emplace_back(kDim, static_cast<float>(w));
  return q;
}

struct CollectiveRun {
  std::vector<std::vector<float>> params;  // each worker's local_params() at the end
  std::vector<collective::CollectiveCounters> counters;
};

// `steps` Steps of strategy `name` on `workers` ranks, worker w on objective w; rank 0
// starts from kInit (the others from zeros: the broadcast must overwrite them).
// between(rank, step, rule) runs before each step (may be empty).
CollectiveRun RunCollective(
    const std::string& name, int workers, StrategyOptions so, int steps,
    const std::string& optimizer = "sgd", Algorithm algorithm = Algorithm::kRing,
    const std::function<GradientFn(int rank, const Quadratic& q, const int* step)>& gradient = {}) {
  so.num_workers = workers;
  const std::vector<Quadratic> q = WorkerObjectives(workers);
  CollectiveRun out;
  out.params.resize(static_cast<std::size_t>(workers));
  out.counters.resize(static_cast<std::size_t>(workers));
  RunRanks(workers, algorithm, [&](Collective& c) {
    const auto r = static_cast<std::size_t>(c.rank());
    auto rule = FindStrategy(name).worker_rule(so);
    auto opt = testing::MakeOptimizer(optimizer);
    const std::vector<float> init = c.rank() == 0 ? kInit : std::vector<float>(kDim, 0.0f);
    int step = 0;
    WorkerEnv env;
    env.worker = c.rank();
    env.num_workers = workers;
    env.collective = &c;
    env.initial = init;
    env.optimizer = opt.get();
    env.options = so.worker;
    env.gradient = gradient ? gradient(c.rank(), q[r], &step) : q[r].Fn();
    // The same gradient reported as two "layers", the second half first (as a backward
    // pass reports them); used by allreduce_sgd with WorkerOptions::overlap.
    env.reporting_gradient = [&env](std::span<const float> p, std::span<float> g,
                                    GradientReady& ready) {
      const float loss = env.gradient(p, g);
      ready.Ready({kDim / 2, kDim - kDim / 2});
      ready.Ready({0, kDim / 2});
      return loss;
    };
    ASSERT_TRUE(rule->Start(env).ok());
    for (step = 0; step < steps; ++step) {
      const StepResult res = rule->Step(env);
      ASSERT_TRUE(res.status.ok());
      ASSERT_TRUE(std::isfinite(res.loss));
    }
    const auto p = rule->local_params();
    out.params[r].assign(p.begin(), p.end());
    out.counters[r] = c.Counters();
  });
  return out;
}

// sync_sgd with every worker in every round and mean aggregation, through the in-memory
// store: the reference allreduce_sgd must match.
std::vector<float> SyncSgd(int workers, const std::string& optimizer, int steps) {
  StrategyOptions so = testing::Options(0.1, 1);
  so.optimizer.name = optimizer;
  so.optimizer.momentum = 0.9;
  Harness h("sync_sgd", workers, so, optimizer);
  const std::vector<Quadratic> q = WorkerObjectives(workers);
  for (int w = 0; w < workers; ++w)
    h.gradients[static_cast<std::size_t>(w)] = q[static_cast<std::size_t>(w)].Fn();
  h.RunThreads(steps);
  const auto v = h.store->values();
  return {v.begin(), v.end()};
}

class AllreduceEqualsSync
    : public ::testing::TestWithParam<std::tuple<int, Algorithm, std::string>> {};

// Horovod's DistributedOptimizer is SyncReplicasOptimizer without the server: with N
// workers and mean aggregation both apply Step(θ, mean_i g_i) every step, the optimizer's
// slots included; and every replica holds the same bits (gloo's allgather copies them).
TEST_P(AllreduceEqualsSync, OnTheSameBatches) {
  const auto& [workers, algorithm, optimizer] = GetParam();
  constexpr int kSteps = 12;
  StrategyOptions so = testing::Options(0.1, 1);
  const CollectiveRun run =
      RunCollective("allreduce_sgd", workers, so, kSteps, optimizer, algorithm);
  const std::vector<float> sync = SyncSgd(workers, optimizer, kSteps);
  for (int w = 0; w < workers; ++w) {
    EXPECT_EQ(run.params[static_cast<std::size_t>(w)], run.params[0]) << "replica " << w;
  }
  ExpectNear(run.params[0], sync, "allreduce_sgd vs sync_sgd");
  EXPECT_NE(run.params[0], kInit);
}

INSTANTIATE_TEST_SUITE_P(Workers, AllreduceEqualsSync,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(Algorithm::kRing,
                                                              Algorithm::kRingChunked,
                                                              Algorithm::kHalvingDoubling),
                                            ::testing::Values("sgd", "momentum")),
                         [](const auto& param_info) {
                           return std::to_string(std::get<0>(param_info.param)) + "_" +
                                  std::string(
                                      collective::AlgorithmName(std::get<1>(param_info.param))) +
                                  "_" + std::get<2>(param_info.param);
                         });

class AllreduceOverlap : public ::testing::TestWithParam<std::tuple<int, Algorithm>> {};

// collective.overlap: the mean gradient allreduced in buckets (here of 4 and of 2 floats,
// neither on the "layers'" boundary) as the gradient reports them: the run equals the one-
// piece allreduce's within rounding, bit for bit at N <= 2 (a + b == b + a), and every
// replica holds the same bits; each step makes one allreduce per bucket.
TEST_P(AllreduceOverlap, EqualsTheOnePieceAllreduce) {
  const auto& [workers, algorithm] = GetParam();
  constexpr int kSteps = 12;
  StrategyOptions so = testing::Options(0.1, 1);
  so.optimizer.momentum = 0.9;
  const CollectiveRun whole =
      RunCollective("allreduce_sgd", workers, so, kSteps, "momentum", algorithm);
  for (const int64_t bucket : {int64_t{4}, int64_t{2}, int64_t{100}}) {
    SCOPED_TRACE(bucket);
    so.worker.overlap = true;
    so.worker.bucket_floats = bucket;
    const CollectiveRun run =
        RunCollective("allreduce_sgd", workers, so, kSteps, "momentum", algorithm);
    for (int w = 0; w < workers; ++w) {
      EXPECT_EQ(run.params[static_cast<std::size_t>(w)], run.params[0]) << "replica " << w;
    }
    if (workers <= 2) {
      EXPECT_EQ(run.params[0], whole.params[0]);
    } else {
      ExpectNear(run.params[0], whole.params[0], "overlapped vs one-piece allreduce");
    }
    const auto buckets = static_cast<uint64_t>((kDim + bucket - 1) / bucket);
    EXPECT_EQ(run.counters[0].allreduces, 1 + kSteps * buckets);  // + the start
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, AllreduceOverlap,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(Algorithm::kRing,
                                                              Algorithm::kRingChunked,
                                                              Algorithm::kHalvingDoubling)),
                         [](const auto& param_info) {
                           return std::to_string(std::get<0>(param_info.param)) + "_" +
                                  std::string(
                                      collective::AlgorithmName(std::get<1>(param_info.param)));
                         });

// Stich 2019 / Lin et al. 2020: local SGD with H = 1 and plain SGD is mini-batch SGD on
// the mean gradient, i.e. allreduce_sgd.
TEST(LocalSgd, WindowOneEqualsAllreduceSgd) {
  for (int workers : {2, 3, 4}) {
    SCOPED_TRACE(workers);
    const CollectiveRun local = RunCollective("local_sgd", workers, testing::Options(0.1, 1), 10);
    const CollectiveRun ar = RunCollective("allreduce_sgd", workers, testing::Options(0.1, 1), 10);
    for (int w = 0; w < workers; ++w) {
      ExpectNear(local.params[static_cast<std::size_t>(w)], ar.params[0], "local_sgd H=1");
    }
  }
}

// With H = 3 the workers drift apart inside a round and agree after each average: after
// 6 steps (two rounds) every worker holds the same parameters; one allreduce of the
// vector per round, besides the start's.
TEST(LocalSgd, WorkersAgreeAfterEveryRound) {
  const CollectiveRun run = RunCollective("local_sgd", 3, testing::Options(0.1, 3), 6);
  for (std::size_t w = 1; w < 3; ++w) EXPECT_EQ(run.params[w], run.params[0]);
  EXPECT_EQ(run.counters[0].allreduces, 1u + 2u);
  const CollectiveRun mid = RunCollective("local_sgd", 3, testing::Options(0.1, 3), 4);
  EXPECT_NE(mid.params[1], mid.params[0]);
}

// local_sgd with H = 3 on the quadratics f_w(θ) = ½ Σ_k h_k (θ_k − c_k − w)² (worker w's
// centre shifted by w), plain SGD: a local step is θ − η h (θ − c_w), so three from a
// common θ give c_w + (1 − ηh)³ (θ − c_w) on worker w, and their average over the 3
// workers is c̄ + (1 − ηh)³ (θ − c̄) with c̄ = c + 1. Pinned after the first round (3
// steps), in the middle of the second (4 steps: the average, then one local step on each
// worker's own objective) and after it (6 steps).
TEST(LocalSgd, WindowThreeIsTheHandComputedAverage) {
  constexpr int kWorkers = 3;
  constexpr double kLr = 0.1;
  const Quadratic q(kDim);
  auto round = [&](const std::vector<double>& theta) {  // one round of 3 steps, averaged
    std::vector<double> out(kDim);
    for (std::size_t k = 0; k < kDim; ++k) {
      const double centre = double{q.c[k]} + 1.0;  // the mean of c + w over w = 0, 1, 2
      out[k] = centre + std::pow(1.0 - kLr * q.h[k], 3) * (theta[k] - centre);
    }
    return out;
  };
  auto as_floats = [](const std::vector<double>& v) {
    return std::vector<float>(v.begin(), v.end());
  };
  const std::vector<double> start(kInit.begin(), kInit.end());
  const std::vector<double> first = round(start), second = round(first);

  const CollectiveRun three = RunCollective("local_sgd", kWorkers, testing::Options(kLr, 3), 3);
  const CollectiveRun four = RunCollective("local_sgd", kWorkers, testing::Options(kLr, 3), 4);
  const CollectiveRun six = RunCollective("local_sgd", kWorkers, testing::Options(kLr, 3), 6);
  for (int w = 0; w < kWorkers; ++w) {
    SCOPED_TRACE(w);
    const auto r = static_cast<std::size_t>(w);
    ExpectNear(three.params[r], as_floats(first), "after one round");
    ExpectNear(six.params[r], as_floats(second), "after two rounds");
    std::vector<double> one_step(kDim);
    for (std::size_t k = 0; k < kDim; ++k) {
      const double centre = double{q.c[k]} + w;
      one_step[k] = first[k] - kLr * q.h[k] * (first[k] - centre);
    }
    ExpectNear(four.params[r], as_floats(one_step), "one local step into the second round");
  }
  // One averaging per round, besides the start's broadcast.
  EXPECT_EQ(three.counters[0].allreduces, 1u + 1u);
  EXPECT_EQ(four.counters[0].allreduces, 1u + 1u);
  EXPECT_EQ(six.counters[0].allreduces, 1u + 2u);
}

// What each dpsgd rank saw and did at every step: the parameters its gradient was taken
// at, the gradient, and its parameters after the step.
struct DpsgdTrace {
  std::vector<std::vector<std::vector<float>>> at, grad, after;  // [rank][step][element]
};

// `steps` dpsgd steps on `workers` ranks (worker w on the quadratic centred at c + w),
// with optimizer options `oo` (learning rate kLr passed to the step).
DpsgdTrace TraceDpsgd(int workers, const OptimizerOptions& oo, double lr, int steps) {
  StrategyOptions so = testing::Options(lr, 1);
  so.num_workers = workers;
  const std::vector<Quadratic> q = WorkerObjectives(workers);
  DpsgdTrace t;
  for (auto* v : {&t.at, &t.grad, &t.after}) v->resize(static_cast<std::size_t>(workers));
  RunRanks(workers, Algorithm::kRing, [&](Collective& c) {
    const auto r = static_cast<std::size_t>(c.rank());
    auto rule = FindStrategy("dpsgd").worker_rule(so);
    auto opt = NewOptimizer(oo, kDim);
    WorkerEnv env;
    env.worker = c.rank();
    env.num_workers = workers;
    env.collective = &c;
    env.initial = kInit;
    env.optimizer = opt.get();
    env.options = so.worker;
    env.gradient = [&, fn = q[r].Fn()](std::span<const float> p, std::span<float> g) {
      const float loss = fn(p, g);
      t.at[r].emplace_back(p.begin(), p.end());
      t.grad[r].emplace_back(g.begin(), g.end());
      return loss;
    };
    ASSERT_TRUE(rule->Start(env).ok());
    for (int s = 0; s < steps; ++s) {
      ASSERT_TRUE(rule->Step(env).status.ok());
      const auto p = rule->local_params();
      t.after[r].emplace_back(p.begin(), p.end());
    }
  });
  return t;
}

// Lian et al. 2017, Algorithm 1, one step at distinct x_{k,i} and non-zero gradients:
// x_{k+1,i} = Σ_j W_ij x_{k,j} − η ∇f_i(x_{k,i}), W the ring's (⅓ to itself and to each
// neighbour), the gradient taken before the gossip. With weight decay λ the regulariser
// is the gradient's, at x_{k,i} too: − η (∇f_i(x_{k,i}) + λ x_{k,i}) (it was taken at the
// gossiped point). Steps 1 and 2 (step 0 starts from the common broadcast point; the
// different objectives then set the workers apart).
TEST(Dpsgd, OneStepIsLianEtAlsEquationAtDistinctPoints) {
  for (const double decay : {0.0, 0.5}) {
    SCOPED_TRACE(decay);
    constexpr int kWorkers = 4;
    constexpr double kLr = 0.1;
    OptimizerOptions oo;
    oo.name = "sgd";
    oo.weight_decay = decay;
    const DpsgdTrace t = TraceDpsgd(kWorkers, oo, kLr, 3);
    ASSERT_NE(t.at[0][1], t.at[1][1]) << "the workers did not move apart";
    for (std::size_t k = 1; k < 3; ++k) {
      for (int i = 0; i < kWorkers; ++i) {
        SCOPED_TRACE("step " + std::to_string(k) + ", worker " + std::to_string(i));
        const auto r = static_cast<std::size_t>(i);
        const auto left = static_cast<std::size_t>((i + kWorkers - 1) % kWorkers);
        const auto right = static_cast<std::size_t>((i + 1) % kWorkers);
        // The gradient was taken at this worker's parameters of the step before.
        EXPECT_EQ(t.at[r][k], t.after[r][k - 1]);
        std::vector<float> want(kDim);
        for (std::size_t e = 0; e < kDim; ++e) {
          const double x = t.at[r][k][e];
          const double mixed = (double{t.at[left][k][e]} + x + double{t.at[right][k][e]}) / 3.0;
          want[e] = static_cast<float>(mixed - kLr * (double{t.grad[r][k][e]} + decay * x));
        }
        ExpectNear(t.after[r][k], want, "x_{k+1,i}");
      }
    }
  }
}

// Momentum in dpsgd is asgd's variant, not in Lian et al. (whose Algorithm 1 is plain
// SGD): each worker keeps its own heavy-ball velocity of its gradients at x_{k,i},
// v_i ← μ v_i + ∇f_i(x_{k,i}) + λ x_{k,i}, never gossiped, and steps from the gossiped
// point: x_{k+1,i} = Σ_j W_ij x_{k,j} − η v_i. Pinned over three steps.
TEST(Dpsgd, MomentumStepsFromTheGossipedPointWithALocalVelocity) {
  constexpr int kWorkers = 4;
  constexpr double kLr = 0.1, kMu = 0.9, kDecay = 0.25;
  OptimizerOptions oo;
  oo.name = "momentum";
  oo.momentum = kMu;
  oo.weight_decay = kDecay;
  const DpsgdTrace t = TraceDpsgd(kWorkers, oo, kLr, 3);
  std::vector<std::vector<double>> v(kWorkers, std::vector<double>(kDim, 0.0));
  for (std::size_t k = 0; k < 3; ++k) {
    for (int i = 0; i < kWorkers; ++i) {
      SCOPED_TRACE("step " + std::to_string(k) + ", worker " + std::to_string(i));
      const auto r = static_cast<std::size_t>(i);
      std::vector<float> want(kDim);
      const auto left = static_cast<std::size_t>((i + kWorkers - 1) % kWorkers);
      const auto right = static_cast<std::size_t>((i + 1) % kWorkers);
      for (std::size_t e = 0; e < kDim; ++e) {
        const double x = t.at[r][k][e];
        const double mixed = (double{t.at[left][k][e]} + x + double{t.at[right][k][e]}) / 3.0;
        v[r][e] = kMu * v[r][e] + t.grad[r][k][e] + kDecay * x;
        want[e] = static_cast<float>(mixed - kLr * v[r][e]);
      }
      ExpectNear(t.after[r][k], want, "x_{k+1,i}");
    }
  }
}

// A ring of 2 has one neighbour and a ring of 3 has both other workers as neighbours: its
// mixing would be a complete average of all the workers every step (the one local_sgd
// with H = 1 takes), not D-PSGD's partial mixing at N >= 4. Refused in one line naming
// algorithm.workers and its value.
TEST(Dpsgd, RefusesTwoAndThreeWorkers) {
  StrategyOptions so = testing::Options(0.1, 1);
  for (int n : {2, 3}) {
    so.num_workers = n;
    try {
      (void)FindStrategy("dpsgd").worker_rule(so);
      ADD_FAILURE() << "dpsgd with " << n << " workers was accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.key(), "algorithm.workers");
      EXPECT_EQ(e.value(), std::to_string(n));
      const std::string what = e.what();
      EXPECT_NE(what.find("1 or at least 4 with dpsgd"), std::string::npos) << what;
      EXPECT_NE(what.find("local_sgd"), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  for (int n : {1, 4, 5}) {
    so.num_workers = n;
    EXPECT_NO_THROW((void)FindStrategy("dpsgd").worker_rule(so)) << n;
  }
}

class DpsgdRing : public ::testing::TestWithParam<int> {};

// Lian et al. 2017: W is symmetric and doubly stochastic, so the mixing step keeps the
// average of the workers' parameters; with zero gradients the workers converge to it.
// The workers first drift apart on their own objectives for 5 steps, then the gradients
// are zero for 30.
TEST_P(DpsgdRing, PreservesTheAverageWhenGradientsAreZero) {
  const int workers = GetParam();
  constexpr int kDrift = 5;
  std::mutex mu;
  std::vector<std::vector<float>> at_switch(static_cast<std::size_t>(workers));
  auto gradient = [&](int rank, const Quadratic& q, const int* step) -> GradientFn {
    return [&, rank, step, fn = q.Fn()](std::span<const float> p, std::span<float> g) {
      if (*step < kDrift) return fn(p, g);
      if (*step == kDrift) {
        std::lock_guard<std::mutex> lock(mu);
        at_switch[static_cast<std::size_t>(rank)].assign(p.begin(), p.end());
      }
      std::fill(g.begin(), g.end(), 0.0f);
      return 0.0f;
    };
  };
  const CollectiveRun run = RunCollective("dpsgd", workers, testing::Options(0.1, 1), kDrift + 30,
                                          "sgd", Algorithm::kRing, gradient);
  auto average = [&](const std::vector<std::vector<float>>& xs) {
    std::vector<float> a(kDim, 0.0f);
    for (const auto& x : xs) {
      for (int i = 0; i < kDim; ++i)
        a[static_cast<std::size_t>(i)] +=
            x[static_cast<std::size_t>(i)] / static_cast<float>(workers);
    }
    return a;
  };
  auto spread = [&](const std::vector<std::vector<float>>& xs) {
    const std::vector<float> a = average(xs);
    double d = 0;
    for (const auto& x : xs) {
      for (int i = 0; i < kDim; ++i) {
        const double e = x[static_cast<std::size_t>(i)] - a[static_cast<std::size_t>(i)];
        d += e * e;
      }
    }
    return d / workers;
  };
  ExpectNear(average(run.params), average(at_switch), "the average");
  if (workers > 1) {
    EXPECT_GT(spread(at_switch), 1e-3) << "the workers did not drift apart";
    EXPECT_LT(spread(run.params), 1e-3 * spread(at_switch)) << "no consensus";
  } else {
    EXPECT_EQ(run.params[0], at_switch[0]);
  }
  // Each step sends the vector to both neighbours, besides the start's allreduce of rank
  // 0's θ_0 (collective_worker.h).
  const uint64_t vector = kDim * sizeof(float);
  const uint64_t per_step = workers == 1 ? 0 : 2 * vector;
  for (int w = 0; w < workers; ++w) {
    const auto& c = run.counters[static_cast<std::size_t>(w)];
    const uint64_t start =
        collective::ExpectedAllreduceBytes(Algorithm::kRing, w, workers, kDim).sent;
    EXPECT_EQ(c.bytes_sent, (kDrift + 30) * per_step + start) << w;
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, DpsgdRing, ::testing::Values(1, 4, 5, 6));

TEST(CollectiveStrategies, BadKeysAreConfigErrors) {
  StrategyOptions so = testing::Options(0.1, 1);
  so.settings.Set("topology", "torus");
  EXPECT_THROW(FindStrategy("dpsgd").worker_rule(so), ConfigError);
  so = testing::Options(0.1, 1);
  so.worker.window = 0;
  EXPECT_THROW(FindStrategy("local_sgd").worker_rule(so), ConfigError);
  EXPECT_THROW(FindStrategy("local_sgd").steps_per_round(so), ConfigError);
}

// A worker that leaves stops its peers with a CollectiveError naming the failed rank and
// the operation, within the timeout: a collective cannot lose a member.
TEST(CollectiveStrategies, APeerThatLeavesFailsTheOthers) {
  auto rendezvous = collective::NewInMemoryRendezvous();
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto c = collective::Connect(collective::testing::RankOptions(
                                         r, 3, Algorithm::kRing, std::chrono::milliseconds(1500)),
                                     rendezvous);
        StrategyOptions so = testing::Options(0.1, 1);
        so.num_workers = 3;
        auto rule = FindStrategy("allreduce_sgd").worker_rule(so);
        auto opt = testing::MakeOptimizer("sgd");
        Quadratic q(kDim);
        WorkerEnv env;
        env.worker = r;
        env.num_workers = 3;
        env.collective = c.get();
        env.initial = kInit;
        env.optimizer = opt.get();
        env.options = so.worker;
        env.gradient = q.Fn();
        ASSERT_TRUE(rule->Start(env).ok());
        for (int s = 0; s < (r == 2 ? 2 : 5); ++s) rule->Step(env);
      } catch (const collective::CollectiveError& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[2], "");
  for (int r : {0, 1}) {
    EXPECT_NE(errors[static_cast<std::size_t>(r)].find("rank " + std::to_string(r) + ": allreduce"),
              std::string::npos)
        << errors[static_cast<std::size_t>(r)];
  }
}

}  // namespace
}  // namespace asgd::algorithms
