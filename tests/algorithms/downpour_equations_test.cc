// DOWNPOUR's equations on hand-computed cases: two workers on one parameter, stepped
// round-robin (worker 0, then worker 1) against the in-memory store, so every push, pull
// and staleness is exact. The rules pinned (algorithms/downpour.cc, windowed_worker.h):
//
//   worker:  θ ← θ − η·g(θ) and a ← a + (−η·g(θ)) every step;
//            after W steps push a (a ← 0); every n_fetch steps θ ← the centre; a push and
//            a fetch due at the same step are one push-pull (θ ← the centre after the push)
//   server (add):      θ̃ ← θ̃ + a
//   server (adagrad):  the push is Δ = Σ of the window's gradients; A ← A + Δ²,
//                      θ̃ ← θ̃ − γ·Δ/√A
//
// The workers minimise ½(θ − t_w)² with targets t_0 = 0 and t_1 = 24, so g = θ − t_w;
// with η = 0.5 a local step is θ ← (θ + t_w)/2. The centre starts at 8. Every value below
// is a dyadic fraction (exact in float), so the add cases compare exactly.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/optimizer.h"
#include "algorithms/strategy.h"
#include "tests/algorithms/strategy_harness.h"

namespace asgd::algorithms {
namespace {

using testing::Harness;

constexpr float kTargets[2] = {0.0f, 24.0f};

// Two DOWNPOUR workers on θ̃ = 8 with the gradients above.
std::unique_ptr<Harness> TwoWorkers(const StrategyOptions& so) {
  auto h = std::make_unique<Harness>("downpour", 2, so, "sgd", std::vector<float>{8.0f});
  for (int w = 0; w < 2; ++w) {
    // Plain SGD on the one parameter (the harness's optimizers are sized for its quadratic).
    OptimizerOptions oo;
    oo.name = "sgd";
    h->optimizers[static_cast<std::size_t>(w)] = NewOptimizer(oo, 1);
    h->envs[static_cast<std::size_t>(w)].optimizer =
        h->optimizers[static_cast<std::size_t>(w)].get();
    const float t = kTargets[w];
    h->gradients[static_cast<std::size_t>(w)] = [t](std::span<const float> p, std::span<float> g) {
      g[0] = p[0] - t;
      return 0.5f * g[0] * g[0];
    };
  }
  return h;
}

struct State {
  float centre, worker0, worker1;
  uint64_t version;
};

// After one more round-robin round, the centre, both workers' parameters and the version.
void ExpectRound(Harness& h, const State& want, const std::string& what) {
  SCOPED_TRACE(what);
  h.Run(1);
  EXPECT_EQ(h.store->values(), std::vector<float>{want.centre});
  EXPECT_EQ(h.local(0), std::vector<float>{want.worker0});
  EXPECT_EQ(h.local(1), std::vector<float>{want.worker1});
  EXPECT_EQ(h.store->version(), want.version);
}

// W = 2, n_fetch = 2: every push is a push-pull.
//   round 1: w0: g = 8, θ0 = 4, a0 = −4;   w1: g = −16, θ1 = 16, a1 = 8;   no push
//   round 2: w0: g = 4, a0 = −6, θ̃ = 8 − 6 = 2, θ0 ← 2;
//            w1: g = −8, a1 = 12, θ̃ = 2 + 12 = 14, θ1 ← 14
//   round 3: w0: g = 2, θ0 = 1, a0 = −1;   w1: g = −10, θ1 = 19, a1 = 5
//   round 4: w0: g = 1, a0 = −1.5, θ̃ = 12.5, θ0 ← 12.5;
//            w1: g = −5, a1 = 7.5, θ̃ = 20, θ1 ← 20
TEST(DownpourEquations, TwoWorkersWindowTwoPushPull) {
  auto h = TwoWorkers(testing::Options(0.5, 2, 2));
  ExpectRound(*h, {8.0f, 4.0f, 16.0f, 0}, "round 1");
  ExpectRound(*h, {14.0f, 2.0f, 14.0f, 2}, "round 2");
  ExpectRound(*h, {14.0f, 1.0f, 19.0f, 2}, "round 3");
  ExpectRound(*h, {20.0f, 12.5f, 20.0f, 4}, "round 4");
  EXPECT_EQ(h->pushes.load(), 4);
  // Staleness = the version a push met − the version its window pulled: w0's first push
  // meets the start (0); each later push meets the other worker's push in between (1).
  const auto records = h->sink.records();
  ASSERT_EQ(records.size(), 4u);
  const uint32_t workers[] = {0, 1, 0, 1};
  const uint64_t pulled[] = {0, 0, 1, 2};
  const int64_t staleness[] = {0, 1, 1, 1};
  for (std::size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i].worker, workers[i]) << "push " << i;
    EXPECT_EQ(records[i].pulled_version, pulled[i]) << "push " << i;
    EXPECT_EQ(records[i].staleness, staleness[i]) << "push " << i;
  }
}

// W = 1, n_fetch = 2: a push every step, a fetch every second step (then a push-pull);
// between fetches a worker keeps its own θ.
//   round 1: w0: θ0 = 4, push −4: θ̃ = 4;     w1: θ1 = 16, push +8: θ̃ = 12
//   round 2: w0: g = 4, push −2: θ̃ = 10, θ0 ← 10;   w1: g = −8, push +4: θ̃ = 14, θ1 ← 14
//   round 3: w0: g = 10, θ0 = 5, push −5: θ̃ = 9;   w1: g = −10, θ1 = 19, push +5: θ̃ = 14
TEST(DownpourEquations, TwoWorkersPushEveryStepFetchEverySecond) {
  auto h = TwoWorkers(testing::Options(0.5, 1, 2));
  ExpectRound(*h, {12.0f, 4.0f, 16.0f, 2}, "round 1");
  ExpectRound(*h, {14.0f, 10.0f, 14.0f, 4}, "round 2");
  ExpectRound(*h, {14.0f, 5.0f, 19.0f, 6}, "round 3");
}

// W = 2, n_fetch = 1: a fetch every step overwrites θ, while the window's accumulator
// keeps every step's update until the push.
//   round 1: w0: g = 8, a0 = −4, θ0 ← 8;   w1: g = −16, a1 = 8, θ1 ← 8
//   round 2: w0: g = 8, a0 = −8, θ̃ = 0, θ0 ← 0;   w1: g = −16, a1 = 16, θ̃ = 16, θ1 ← 16
//   round 3: w0: g = 0, a0 = 0, θ0 ← 16;   w1: g = −8, a1 = 4, θ1 ← 16
//   round 4: w0: g = 16, a0 = −8, θ̃ = 8, θ0 ← 8;   w1: g = −8, a1 = 8, θ̃ = 16, θ1 ← 16
TEST(DownpourEquations, TwoWorkersFetchEveryStepInsideTheWindow) {
  auto h = TwoWorkers(testing::Options(0.5, 2, 1));
  ExpectRound(*h, {8.0f, 8.0f, 8.0f, 0}, "round 1");
  ExpectRound(*h, {16.0f, 0.0f, 16.0f, 2}, "round 2");
  ExpectRound(*h, {16.0f, 16.0f, 16.0f, 2}, "round 3");
  ExpectRound(*h, {16.0f, 8.0f, 16.0f, 4}, "round 4");
}

// server_optimizer = adagrad, W = 2, γ = 1, A0 = 25: the push is the window's summed raw
// gradients. w0: Δ0 = 8 + 4 = 12, A = 25 + 144 = 169, θ̃ = 8 − 12/13; w1: Δ1 = −16 − 8 =
// −24, A = 169 + 576 = 745, θ̃ = 8 − 12/13 + 24/√745.
TEST(DownpourEquations, TwoWorkersServerAdagrad) {
  StrategyOptions so = testing::Options(0.5, 2, 2);
  so.settings.Set("server_optimizer", "adagrad");
  so.settings.Set("server_learning_rate", 1.0);
  so.server_initial_accumulator = 25.0;
  auto h = TwoWorkers(so);
  h->Run(1);
  EXPECT_EQ(h->store->values(), std::vector<float>{8.0f});
  h->Run(1);
  const double after_w0 = 8.0 - 12.0 / 13.0;
  const double after_w1 = after_w0 + 24.0 / std::sqrt(745.0);
  EXPECT_FLOAT_EQ(h->store->values()[0], static_cast<float>(after_w1));
  EXPECT_FLOAT_EQ(h->local(0)[0], static_cast<float>(after_w0));
  EXPECT_FLOAT_EQ(h->local(1)[0], static_cast<float>(after_w1));
  EXPECT_EQ(h->store->version(), 2u);
}

}  // namespace
}  // namespace asgd::algorithms
