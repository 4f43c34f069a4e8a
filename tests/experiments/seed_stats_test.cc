// Runs that differ only in their seed (experiments/analysis/seed_stats.h): Student's t
// quantiles against the published table, the interval against a hand computation, the
// overlap rule, and which configs count as seeds of one.
#include "experiments/analysis/seed_stats.h"

#include <cmath>
#include <map>
#include <string>

#include <gtest/gtest.h>

namespace asgd::experiments {
namespace {

TEST(SeedStats, StudentTQuantilesMatchTheTable) {
  // t(0.975, df) as printed in tables of Student's t distribution (3 decimals).
  const std::map<int64_t, double> table = {{1, 12.706}, {2, 4.303}, {3, 3.182},  {4, 2.776},
                                           {5, 2.571},  {9, 2.262}, {30, 2.042}, {120, 1.980}};
  for (const auto& [df, t] : table) EXPECT_NEAR(StudentT975(df), t, 5e-4) << "df " << df;
  // Large df tend to the normal quantile 1.95996.
  EXPECT_NEAR(StudentT975(1000000), 1.959966, 1e-5);
  EXPECT_GT(StudentT975(1000), StudentT975(1000000));
}

TEST(SeedStats, ThreeSeedsGiveTheIntervalOfAHandComputation) {
  const MeanInterval m = Interval95({0.90, 0.93, 0.96, std::nan("")});
  ASSERT_EQ(m.n, 3);
  // mean 0.93; s = sqrt((0.03² + 0 + 0.03²) / 2) = 0.03; half-width 4.303 · 0.03 / √3.
  EXPECT_NEAR(m.mean, 0.93, 1e-12);
  EXPECT_NEAR(m.std, 0.03, 1e-12);
  EXPECT_NEAR(m.half_width, 4.302653 * 0.03 / std::sqrt(3.0), 1e-6);
  EXPECT_NEAR(m.Low(), 0.93 - m.half_width, 1e-12);
  const MeanInterval one = Interval95({0.5});
  EXPECT_EQ(one.n, 1);
  EXPECT_FALSE(one.HasInterval());
  EXPECT_TRUE(std::isnan(one.half_width));
  EXPECT_EQ(Interval95({}).n, 0);
  EXPECT_TRUE(std::isnan(Interval95({}).mean));
}

TEST(SeedStats, OverlappingIntervalsAreNotSeparated) {
  const MeanInterval a = Interval95({1.0, 1.1, 1.2});  // about 0.85 .. 1.35
  const MeanInterval b = Interval95({1.3, 1.4, 1.5});  // about 1.15 .. 1.65
  const MeanInterval c = Interval95({5.0, 5.1, 5.2});
  EXPECT_TRUE(NotSeparated(a, b));
  EXPECT_TRUE(NotSeparated(b, a));
  EXPECT_FALSE(NotSeparated(a, c));
  // One seed has no interval: nothing to say.
  EXPECT_FALSE(NotSeparated(a, Interval95({1.1})));
  EXPECT_EQ(BestRow({a, b, c}, true), 2);
  EXPECT_EQ(BestRow({a, b, c}, false), 0);
  EXPECT_EQ(BestRow({Interval95({}), b}, false), 1);
  EXPECT_EQ(BestRow({Interval95({})}, false), -1);
}

TEST(SeedStats, RunsThatDifferOnlyInSeedNameAndFolderAreOneGroup) {
  using Config = std::map<std::string, std::string>;
  const Config a = {{"experiment.seed", "1"},         {"experiment.name", "lr=0.1"},
                    {"experiment.out_dir", "x/runs"}, {"algorithm.learning_rate", "0.1"},
                    {"model.device", "cuda:0"},       {"cluster.base_port", "23400"}};
  Config a2 = a;
  a2["experiment.seed"] = "2";
  a2["experiment.name"] = "other";
  a2["experiment.out_dir"] = "y/runs";
  a2["model.device"] = "cuda:1";
  a2["cluster.base_port"] = "23404";
  Config b = a;
  b["algorithm.learning_rate"] = "0.2";
  const SeedGrouping g = GroupSeeds({"lr=0.1", "lr=0.1", "lr=0.2", "lr=0.1", "lr=0.1"},
                                    {a, a2, b, Config{}, Config{}});
  EXPECT_EQ(g.group, (std::vector<std::size_t>{0, 0, 1, 2, 3}));
  ASSERT_EQ(g.labels.size(), 4u);
  EXPECT_EQ(g.labels[0], "lr=0.1");
  EXPECT_EQ(g.labels[1], "lr=0.2");
  // Runs without a config.ini are rows of their own, their labels made unique.
  EXPECT_EQ(g.labels[2], "lr=0.1 #2");
  EXPECT_EQ(g.labels[3], "lr=0.1 #3");
  EXPECT_EQ(g.members[0], (std::vector<std::size_t>{0, 1}));
}

}  // namespace
}  // namespace asgd::experiments
