#include "compression/error_feedback.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "core/rng.h"

namespace asgd::compression {
namespace {

// Updates on the grid 2^-8 * [-1024, 1024]: with the compressors' scales (floats near
// these magnitudes) every sum below stays inside double's 53 bits, where error feedback
// promises the identity exactly (error_feedback.h).
std::vector<float> GridUpdate(std::size_t n, Rng& rng) {
  std::vector<float> x(n);
  for (float& v : x) {
    v = static_cast<float>(static_cast<int64_t>(rng.UniformInt(2049)) - 1024) / 256.0f;
  }
  return x;
}

// sum_t sent_t + e_T == sum_t x_t, exactly, summed in the order the worker pushes.
TEST(ErrorFeedback, SentPlusResidualIsTheSumOfUpdates) {
  constexpr std::size_t kN = 67;  // not a multiple of 64: odd tails in the packed forms
  constexpr int kSteps = 60;
  for (const std::string name : {"topk", "randk", "qsgd", "sign", "terngrad"}) {
    CompressionOptions o;
    o.name = name;
    o.ratio = 0.1;
    o.levels = 4;
    o.error_feedback = true;
    auto c = NewCompressor(o);
    ErrorFeedback ef(kN);
    Rng data(5), draws(DeriveSeed(1, name));
    std::vector<double> updates(kN, 0.0), sent(kN, 0.0);
    std::vector<float> decoded(kN);
    double largest_residual = 0;
    for (int t = 0; t < kSteps; ++t) {
      const std::vector<float> x = GridUpdate(kN, data);
      Encoded e;
      ef.Encode(*c, x, draws, &e, decoded);
      EXPECT_LT(e.bytes(), static_cast<int64_t>(kN * 4)) << name;
      for (std::size_t i = 0; i < kN; ++i) {
        updates[i] += x[i];
        sent[i] += decoded[i];
      }
      largest_residual = std::max(largest_residual, ef.ResidualNorm());
    }
    EXPECT_GT(largest_residual, 0) << name << ": nothing was left out, the test proves nothing";
    for (std::size_t i = 0; i < kN; ++i) {
      EXPECT_EQ(sent[i] + ef.residual()[i], updates[i]) << name << " element " << i;
    }
  }
}

// The residual is what the last push left out: p_t - decode(c_t), here for topk where
// decode keeps k coordinates of p_t and zeroes the rest.
TEST(ErrorFeedback, ResidualIsWhatTheLastPushLeftOut) {
  CompressionOptions o;
  o.name = "topk";
  o.ratio = 0.5;
  auto c = NewCompressor(o);
  ErrorFeedback ef(4);
  Rng rng(1);
  Encoded e;
  std::vector<float> sent(4);
  ef.Encode(*c, std::vector<float>{1, -4, 2, 0.5f}, rng, &e, sent);
  EXPECT_EQ(sent, (std::vector<float>{0, -4, 2, 0}));
  EXPECT_EQ(std::vector<double>(ef.residual().begin(), ef.residual().end()),
            (std::vector<double>{1, 0, 0, 0.5}));
  // p = {1 + 1, -1, 0, 0.5}: the residual lifts element 0 into the top 2.
  ef.Encode(*c, std::vector<float>{1, -1, 0, 0}, rng, &e, sent);
  EXPECT_EQ(sent, (std::vector<float>{2, -1, 0, 0}));
  EXPECT_DOUBLE_EQ(ef.ResidualNorm(), 0.5);
}

}  // namespace
}  // namespace asgd::compression
