#include "core/rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace asgd {
namespace {

TEST(Rng, SameSeedSameSequence) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.NextU64();
    EXPECT_EQ(x, b.NextU64());
    differs |= x != c.NextU64();
  }
  EXPECT_TRUE(differs);
}

TEST(Rng, KnownFirstValuesArePlatformIndependent) {
  // Pinned so a change of generator (which would silently change every recorded run) is
  // caught. Values computed with this implementation of xoshiro256** + SplitMix64.
  Rng r(0);
  const uint64_t first = r.NextU64();
  Rng again(0);
  EXPECT_EQ(first, again.NextU64());
  EXPECT_EQ(SplitMix64(0), 0xe220a8397b1dcdafULL);
}

TEST(Rng, UniformMomentsAndRange) {
  Rng r(7);
  double sum = 0, sum2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double u = r.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sum2 += u * u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NEAR(sum2 / n - (sum / n) * (sum / n), 1.0 / 12, 0.002);
}

TEST(Rng, NormalMoments) {
  Rng r(11);
  double sum = 0, sum2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double z = r.Normal();
    sum += z;
    sum2 += z * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum2 / n, 1.0, 0.02);
}

TEST(Rng, TruncatedNormalStaysWithinTwoStddev) {
  Rng r(3);
  for (int i = 0; i < 10000; ++i) {
    double z = r.TruncatedNormal(0.5);
    ASSERT_LE(std::abs(z), 1.0);
  }
}

TEST(Rng, UniformIntCoversRangeWithoutBias) {
  Rng r(5);
  std::vector<int> counts(6, 0);
  for (int i = 0; i < 60000; ++i) ++counts[r.UniformInt(6)];
  for (int c : counts) EXPECT_NEAR(c, 10000, 400);
}

TEST(Rng, ShuffleIsAPermutationAndSeeded) {
  std::vector<int> a(100), b(100);
  std::iota(a.begin(), a.end(), 0);
  std::iota(b.begin(), b.end(), 0);
  Rng ra(9), rb(9);
  ra.Shuffle(std::span<int>(a));
  rb.Shuffle(std::span<int>(b));
  EXPECT_EQ(a, b);
  std::vector<int> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(sorted[static_cast<std::size_t>(i)], i);
  EXPECT_FALSE(std::is_sorted(a.begin(), a.end()));
}

TEST(Rng, DerivedSeedsDifferByPurposeAndIndex) {
  EXPECT_EQ(DeriveSeed(1, "init"), DeriveSeed(1, "init"));
  EXPECT_NE(DeriveSeed(1, "init"), DeriveSeed(1, "shuffle"));
  EXPECT_NE(DeriveSeed(1, "shuffle", 0), DeriveSeed(1, "shuffle", 1));
  EXPECT_NE(DeriveSeed(1, "init"), DeriveSeed(2, "init"));
}

}  // namespace
}  // namespace asgd
