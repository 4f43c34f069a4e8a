// signsgd_vote against its equation (Bernstein et al. 2018 §3, 2019 Algorithm 1) on small
// exact cases: workers push sign(g) with sign(0) = +1 (one bit has no zero), a round steps
// θ ← θ − η·sign(Σ_k sign(g_k)) with sign(0) = 0 on a tied vote, Signum pushes the sign of
// m ← β·m + (1 − β)·g, and through the sign compressor a push is one bit per coordinate
// and the result unchanged.
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "algorithms/strategy.h"
#include "compression/compressor.h"
#include "tests/algorithms/strategy_harness.h"

namespace asgd::algorithms {
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

std::vector<float> Stepped(const std::vector<float>& vote, int rounds) {
  std::vector<float> want = kInit;
  for (int i = 0; i < kDim; ++i) want[i] -= static_cast<float>(rounds * kRate) * vote[i];
  return want;
}

// Three workers, fixed gradients, two rounds. Worker signs (0 and -0 are +1):
//   w0 { 1,  2, -1,  0,   -0,  3} -> + + - + + +
//   w1 { 1, -2, -1,  0.5, -1, -3} -> + - - + - -
//   w2 {-1, -2,  4, -0.5, -1,  0} -> - - + - - +
//   sum                              1 -1 -1 1 -1 1  = the vote (N = 3 has no ties)
// Were sign(0) = 0 on the worker, coordinates 3 and 5 would tie and not move.
TEST(SignSgdVote, ARoundStepsByTheMajorityOfTheWorkersSigns) {
  Harness h("signsgd_vote", 3, testing::Options(kRate, 1));
  h.gradients = {Constant({1, 2, -1, 0, -0.0f, 3}), Constant({1, -2, -1, 0.5f, -1, -3}),
                 Constant({-1, -2, 4, -0.5f, -1, 0})};
  h.RunThreads(2);
  EXPECT_EQ(h.store->version(), 2u);
  const std::vector<float> vote = {1, -1, -1, 1, -1, 1};
  EXPECT_EQ(h.store->values(), Stepped(vote, 2));
  for (std::size_t w = 0; w < 3; ++w) EXPECT_EQ(h.local(w), Stepped(vote, 2)) << w;
}

// Two workers that disagree: the vote's sum is 0 and sign(0) = 0, the coordinate stays.
//   w0 { 1, -1, 1,  0, 2, -3} -> + - + + + -
//   w1 {-1,  1, 1, -2, 5, -1} -> - + + - + -
//   vote                         0 0 1 0 1 -1
TEST(SignSgdVote, ATiedVoteMovesNothing) {
  Harness h("signsgd_vote", 2, testing::Options(kRate, 1));
  h.gradients = {Constant({1, -1, 1, 0, 2, -3}), Constant({-1, 1, 1, -2, 5, -1})};
  h.RunThreads(3);
  EXPECT_EQ(h.store->values(), Stepped({0, 0, 1, 0, 1, -1}, 3));
}

// Signum: the worker pushes sign(m), m ← β·m + (1 − β)·g from m = 0. With β = 0.5 and
// g = 1, -0.5, -1 on every coordinate: m = 0.5, 0, -0.5 -> signs +, + (sign(0) = +1), -;
// plain signSGD (β = 0) pushes +, -, -.
TEST(SignSgdVote, SignumPushesTheSignOfTheMomentum) {
  for (const double beta : {0.5, 0.0}) {
    SCOPED_TRACE(beta);
    StrategyOptions so = testing::Options(kRate, 1);
    so.settings.Set("sign_momentum", beta);
    Harness h("signsgd_vote", 1, so);
    auto step = std::make_shared<int>(0);
    h.gradients = {[step](std::span<const float>, std::span<float> g) {
      const float v = std::vector<float>{1, -0.5f, -1}[static_cast<std::size_t>((*step)++)];
      std::fill(g.begin(), g.end(), v);
      return 0.0f;
    }};
    h.Run(3);
    const float moved = beta > 0 ? -1 + -1 + 1 : -1 + 1 + 1;  // -η·sign per step, summed
    std::vector<float> want = kInit;
    for (float& v : want) v += static_cast<float>(kRate) * moved;
    EXPECT_EQ(h.store->values(), want);
  }
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
