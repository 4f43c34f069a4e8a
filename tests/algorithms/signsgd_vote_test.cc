// signsgd_vote against its equation (Bernstein et al. 2018 §3, 2019 Algorithm 1) on small
// exact cases: workers push sign(g + λθ), ±1 with a fair seeded coin for an exact zero (one
// bit has no zero), a round steps θ ← θ − η·sign(Σ_k sign(g_k)) with sign(0) = 0 on a tied
// vote, Signum pushes the sign of m ← β·m + (1 − β)·(g + λθ) (the authors' reference
// Signum), a coordinate whose gradient is zero everywhere does not drift, and through the
// sign compressor a push is one bit per coordinate and the result unchanged.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/strategy.h"
#include "compression/compressor.h"
#include "tests/algorithms/strategy_harness.h"

namespace asgd::algorithms {

using ps::Traffic;
namespace {

using testing::Harness;
using testing::kDim;
using testing::kInit;

constexpr double kRate = 0.25;  // steps of 0.25 are exact in float from kInit

GradientFn Constant(std::vector<float> g) {
  return [g](std::span<const float>, std::span<float> out) {
    std::copy(g.begin(), g.end(), out.begin());
    return 0.0f;
  };
}

// The i-th call returns steps[i] (the last one again after the end).
GradientFn Sequence(std::vector<std::vector<float>> steps) {
  auto next = std::make_shared<std::size_t>(0);
  return [steps = std::move(steps), next](std::span<const float>, std::span<float> out) {
    const std::vector<float>& g = steps[std::min(*next, steps.size() - 1)];
    ++*next;
    std::copy(g.begin(), g.end(), out.begin());
    return 0.0f;
  };
}

std::vector<float> Stepped(const std::vector<float>& vote, int rounds) {
  std::vector<float> want = kInit;
  for (int i = 0; i < kDim; ++i) want[i] -= static_cast<float>(rounds * kRate) * vote[i];
  return want;
}

// Three workers, fixed gradients, two rounds. Worker signs:
//   w0 { 1,  2, -1,  0.25, 0.5,  3}    -> + + - + + +
//   w1 { 1, -2, -1,  0.5,  -1,  -3}    -> + - - + - -
//   w2 {-1, -2,  4, -0.5,  -1,   0.75} -> - - + - - +
//   sum                                   1 -1 -1 1 -1 1  = the vote (N = 3 has no ties)
TEST(SignSgdVote, ARoundStepsByTheMajorityOfTheWorkersSigns) {
  Harness h("signsgd_vote", 3, testing::Options(kRate, 1));
  h.gradients = {Constant({1, 2, -1, 0.25f, 0.5f, 3}), Constant({1, -2, -1, 0.5f, -1, -3}),
                 Constant({-1, -2, 4, -0.5f, -1, 0.75f})};
  h.RunThreads(2);
  EXPECT_EQ(h.store->version(), 2u);
  const std::vector<float> vote = {1, -1, -1, 1, -1, 1};
  EXPECT_EQ(h.store->values(), Stepped(vote, 2));
  for (std::size_t w = 0; w < 3; ++w) EXPECT_EQ(h.local(w), Stepped(vote, 2)) << w;
}

// Two workers that disagree: the vote's sum is 0 and sign(0) = 0, the coordinate stays.
//   w0 { 1, -1, 1,  0.5, 2, -3} -> + - + + + -
//   w1 {-1,  1, 1, -2,   5, -1} -> - + + - + -
//   vote                           0 0 1 0 1 -1
TEST(SignSgdVote, ATiedVoteMovesNothing) {
  Harness h("signsgd_vote", 2, testing::Options(kRate, 1));
  h.gradients = {Constant({1, -1, 1, 0.5f, 2, -3}), Constant({-1, 1, 1, -2, 5, -1})};
  h.RunThreads(3);
  EXPECT_EQ(h.store->values(), Stepped({0, 0, 1, 0, 1, -1}, 3));
}

// Signum: the worker pushes sign(m), m ← β·m + (1 − β)·g from m = 0. With β = 0.5 and
// g = 1, -0.25, -1 on every coordinate: m = 0.5, 0.125, -0.4375 -> signs +, +, -; plain
// signSGD (β = 0) pushes +, -, -.
TEST(SignSgdVote, SignumPushesTheSignOfTheMomentum) {
  for (const double beta : {0.5, 0.0}) {
    SCOPED_TRACE(beta);
    StrategyOptions so = testing::Options(kRate, 1);
    so.settings.Set("sign_momentum", beta);
    Harness h("signsgd_vote", 1, so);
    h.gradients = {Sequence({{1, 1, 1, 1, 1, 1},
                             {-0.25f, -0.25f, -0.25f, -0.25f, -0.25f, -0.25f},
                             {-1, -1, -1, -1, -1, -1}})};
    h.Run(3);
    const float moved = beta > 0 ? -1 + -1 + 1 : -1 + 1 + 1;  // -η·sign per step, summed
    std::vector<float> want = kInit;
    for (float& v : want) v += static_cast<float>(kRate) * moved;
    EXPECT_EQ(h.store->values(), want);
  }
}

// Weight decay as the authors' reference Signum (Signum_pytorch, signum.py) applies it:
// coupled L2 inside the momentum, d = g + λθ at the worker's θ (the server's, from the
// last reply); m ← β·m + (1 − β)·d; θ ← θ − η·sign(m). By hand, λ = 0.5, η = 0.25, one
// worker, θ_0 = {1, -2, 0.5, 4}:
//   g_1 = {-0.25, 0.75, 1, -1}:  d = {0.25, -0.25, 1.25, 1}
//     β = 0.5: m = {0.125, -0.125, 0.625, 0.5}  -> + - + +   (sign(g_1) is - + + -)
//     β = 0:   the signs of d                    -> + - + +
//     θ_1 = {0.75, -1.75, 0.25, 3.75}
//   g_2 = {-0.25, -3, 1, -2}:    d = {0.125, -3.875, 1.125, -0.125}
//     β = 0.5: m = {0.125, -2, 0.875, 0.1875}   -> + - + +   θ_2 = {0.5, -1.5, 0, 3.5}
//     β = 0:                                     -> + - + -   θ_2 = {0.5, -1.5, 0, 4}
// Without the decay term the first step's signs would be - + + - (θ_1 = {1.25, -2.25, 0.25,
// 4.25}); decoupled decay (θ ← θ − ηλθ beside the vote) would not keep θ on multiples of η.
TEST(SignSgdVote, WeightDecayIsInsideTheMomentumAsInTheReferenceSignum) {
  struct Case {
    double beta;
    std::vector<float> want;
  };
  for (const Case& c : {Case{0.5, {0.5f, -1.5f, 0, 3.5f}}, Case{0.0, {0.5f, -1.5f, 0, 4}}}) {
    SCOPED_TRACE(c.beta);
    StrategyOptions so = testing::Options(kRate, 1);
    so.settings.Set("sign_momentum", c.beta);
    so.optimizer.weight_decay = 0.5;
    Harness h("signsgd_vote", 1, so, "sgd", {1, -2, 0.5f, 4});
    h.gradients = {Sequence({{-0.25f, 0.75f, 1, -1}, {-0.25f, -3, 1, -2}})};
    h.Run(1);
    EXPECT_EQ(h.store->values(), (std::vector<float>{0.75f, -1.75f, 0.25f, 3.75f}));
    h.Run(1);
    EXPECT_EQ(h.store->values(), c.want);
    EXPECT_EQ(h.local(0), c.want);
  }
}

// A coordinate whose gradient is exactly 0 (+0 or -0) on every worker, a dead ReLU unit or
// a parameter the loss does not use, must not drift. Each worker's sign of an exact zero
// is a fair coin from its own seeded stream, so the vote on such a coordinate is a sum of
// independent ±1 of mean 0 and its displacement after R rounds a random walk of steps ±η:
// mean 0, standard deviation η·√R per coordinate, η·√(R/Z) for the mean of Z coordinates.
// (With sign(0) = +1 every vote was unanimous: −η·R.) 5 workers (no ties), R = 200
// rounds, Z = 48 zero coordinates (σ of their mean displacement: 2.04η) beside 16 with a
// gradient of 1, which move −η every round. Through the sign compressor the pushes are
// still ±1, one bit each, and the run the same.
TEST(SignSgdVote, ACoordinateWhoseGradientIsZeroEverywhereDoesNotDrift) {
  constexpr int kWorkers = 5, kRounds = 200, kZeros = 48, kSize = 64;
  const std::vector<float> init(kSize, 1.0f);
  std::vector<float> g(kSize, 1.0f);
  for (int i = 0; i < kZeros; ++i) g[static_cast<std::size_t>(i)] = i % 2 == 0 ? 0.0f : -0.0f;
  auto run = [&](bool compressed) {
    auto h = std::make_unique<Harness>("signsgd_vote", kWorkers, testing::Options(kRate, 1), "sgd",
                                       init);
    h->gradients.assign(kWorkers, Constant(g));
    if (compressed) {
      compression::CompressionOptions o;
      o.name = "sign";
      h->CompressPushes(o);
    }
    h->RunThreads(kRounds);
    return h;
  };
  const auto dense = run(false);
  const std::vector<float> theta = dense->store->values();
  double sum = 0;
  for (int i = 0; i < kZeros; ++i) {
    const double moved = theta[static_cast<std::size_t>(i)] - 1.0;
    sum += moved;
    EXPECT_LE(std::abs(moved), 5 * kRate * std::sqrt(kRounds)) << i;  // 5σ
  }
  const double mean = sum / kZeros;
  EXPECT_LE(std::abs(mean), 5 * kRate * std::sqrt(double{kRounds} / kZeros)) << mean;
  // The coins differ from coordinate to coordinate (no coordinate-wide bias either).
  EXPECT_NE(std::count(theta.begin(), theta.begin() + kZeros, theta[0]), kZeros);
  for (int i = kZeros; i < kSize; ++i) {
    EXPECT_EQ(theta[static_cast<std::size_t>(i)], static_cast<float>(1.0 - kRounds * kRate)) << i;
  }
  const auto packed = run(true);
  EXPECT_EQ(packed->store->values(), theta);
  EXPECT_EQ(packed->clients[0]->traffic().bytes_pushed, kRounds * (4 + 8));  // 64 bits + scale
}

// The coins come from each worker's seed (WorkerRuleSeed of the run's seed and the
// worker): the same seeds give the same run bit for bit, whatever the threads' timing;
// other seeds another.
TEST(SignSgdVote, TheSignsOfZerosFollowTheSeed) {
  auto run = [](uint64_t run_seed) {
    Harness h("signsgd_vote", 3, testing::Options(kRate, 1));
    h.gradients.assign(3, Constant(std::vector<float>(kDim, 0.0f)));
    for (int w = 0; w < 3; ++w) {
      h.envs[static_cast<std::size_t>(w)].seed = WorkerRuleSeed(run_seed, w);
    }
    h.RunThreads(20);
    return h.store->values();
  };
  EXPECT_EQ(run(1), run(1));
  EXPECT_NE(run(1), run(2));
  EXPECT_NE(WorkerRuleSeed(1, 0), WorkerRuleSeed(1, 1));
}

// Through the sign compressor a push of d coordinates is d bits (whole 64-bit words) and
// a 4-byte scale, which for ±1 is exactly 1: the rounds are those of the dense votes.
TEST(SignSgdVote, OneBitPerCoordinateThroughTheSignCompressor) {
  auto run = [](bool compressed) {
    auto h = std::make_unique<Harness>("signsgd_vote", 3, testing::Options(kRate, 1));
    if (compressed) {
      compression::CompressionOptions o;
      o.name = "sign";
      h->CompressPushes(o);
    }
    h->RunThreads(5);  // on the quadratic: gradients change with θ
    return h;
  };
  const auto dense = run(false);
  const auto packed = run(true);
  EXPECT_EQ(packed->store->values(), dense->store->values());
  EXPECT_NE(dense->store->values(), kInit);
  const Traffic& t = packed->clients[0]->traffic();
  EXPECT_EQ(t.bytes_pushed, 5 * (4 + 8));  // 6 bits in one word, plus the scale
  EXPECT_EQ(t.dense_bytes_pushed, 5 * kDim * 4);
}

}  // namespace
}  // namespace asgd::algorithms
