#include "datasets/partition.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "core/error.h"

namespace asgd::datasets {
namespace {

TEST(Partition, ShuffledIndicesIsASeededPermutation) {
  std::vector<int64_t> a = ShuffledIndices(1000, 7);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, AllIndices(1000));
  EXPECT_NE(a, AllIndices(1000));
  EXPECT_EQ(a, ShuffledIndices(1000, 7));
  EXPECT_NE(a, ShuffledIndices(1000, 8));
  EXPECT_TRUE(ShuffledIndices(0, 1).empty());
}

TEST(Partition, SampleIndicesAreDistinctSortedSeededAndUniform) {
  const std::vector<int64_t> a = SampleIndices(1000, 100, 7);
  ASSERT_EQ(a.size(), 100u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(std::adjacent_find(a.begin(), a.end()), a.end());  // distinct
  EXPECT_GE(a.front(), 0);
  EXPECT_LT(a.back(), 1000);
  EXPECT_EQ(a, SampleIndices(1000, 100, 7));
  EXPECT_NE(a, SampleIndices(1000, 100, 8));
  EXPECT_EQ(SampleIndices(50, 50, 3), AllIndices(50));
  EXPECT_TRUE(SampleIndices(50, 0, 3).empty());
  // Not the first k: over 200 seeds, 10 of 1,000 examples fall into each half about
  // equally often (the first half is drawn 1,000 times in expectation; the bounds are
  // seven standard deviations, 7·sqrt(2000·0.25) ≈ 157).
  int64_t first_half = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    for (const int64_t i : SampleIndices(1000, 10, seed)) first_half += i < 500;
  }
  EXPECT_GT(first_half, 1000 - 157);
  EXPECT_LT(first_half, 1000 + 157);
}

class PartitionSizes : public ::testing::TestWithParam<std::pair<int64_t, int>> {};

TEST_P(PartitionSizes, DisjointCoveringNearEqualAndDeterministic) {
  auto [n, shards] = GetParam();
  auto parts = PartitionIndices(n, shards, 123);
  ASSERT_EQ(parts.size(), static_cast<std::size_t>(shards));
  std::vector<int64_t> all;
  std::size_t lo = SIZE_MAX, hi = 0;
  for (int s = 0; s < shards; ++s) {
    lo = std::min(lo, parts[s].size());
    hi = std::max(hi, parts[s].size());
    all.insert(all.end(), parts[s].begin(), parts[s].end());
    EXPECT_EQ(parts[s], ShardIndices(n, shards, s, 123)) << "shard " << s;
  }
  EXPECT_LE(hi - lo, 1u);
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, AllIndices(n));  // every example exactly once
  EXPECT_EQ(parts, PartitionIndices(n, shards, 123));
}

INSTANTIATE_TEST_SUITE_P(Sizes, PartitionSizes,
                         ::testing::Values(std::pair<int64_t, int>{1, 1},
                                           std::pair<int64_t, int>{10, 3},
                                           std::pair<int64_t, int>{60000, 7},
                                           std::pair<int64_t, int>{32561, 16},
                                           std::pair<int64_t, int>{5, 5}));

TEST(Partition, SeedChangesTheAssignment) {
  EXPECT_NE(PartitionIndices(100, 4, 1), PartitionIndices(100, 4, 2));
}

TEST(Partition, ShardsAreNotContiguousRanges) {
  // Shuffled before cutting: a shard of sorted data (e.g. LIBSVM files grouped by
  // label) must not get one class only.
  auto parts = PartitionIndices(1000, 2, 5);
  int64_t low = std::count_if(parts[0].begin(), parts[0].end(), [](int64_t i) { return i < 500; });
  EXPECT_GT(low, 200);
  EXPECT_LT(low, 300);
}

TEST(Partition, MoreShardsThanExamplesIsAConfigError) {
  EXPECT_THROW(PartitionIndices(3, 4, 1), ConfigError);
  EXPECT_THROW(PartitionIndices(3, 0, 1), ConfigError);
  EXPECT_THROW(ShardIndices(3, 4, 0, 1), ConfigError);
  EXPECT_THROW(ShardIndices(3, 2, 2, 1), InvariantError);
}

}  // namespace
}  // namespace asgd::datasets
