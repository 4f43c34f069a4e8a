// Placement policies (ps/placement.h): which shard owns which elements of the flat
// vector. Every policy must cover every element exactly once (else pushes are lost or
// applied twice), and each must place tensors the way its TensorFlow namesake does, so
// users get the load balance they expect.
#include "ps/placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/error.h"
#include "core/param_layout.h"
#include "core/rng.h"

namespace asgd::ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Placement Build(const ParamLayout& layout, int shards, PlacementPolicy policy,
                int64_t partition_min_elements = 0) {
  PlacementOptions options;
  options.policy = policy;
  options.partition_min_elements = partition_min_elements;
  return Placement::Build(layout, shards, options);
}

// Tensors of 10, 4, 4, 3, 8 and 1 elements at offsets 0, 10, 14, 18, 21, 29.
ParamLayout SixTensors() {
  ParamLayout layout;
  layout.Add("t0", {2, 5});
  layout.Add("t1", {4});
  layout.Add("t2", {2, 2});
  layout.Add("t3", {3});
  layout.Add("t4", {2, 2, 2});
  layout.Add("t5", {});  // a scalar
  return layout;
}

// Counts, independently of Placement::Validate, how often each element is owned.
std::vector<int> Coverage(const Placement& p) {
  std::vector<int> owned(static_cast<std::size_t>(p.total_elements()), 0);
  for (int s = 0; s < p.num_shards(); ++s) {
    int64_t size = 0;
    for (const Range& r : p.ranges(s)) {
      EXPECT_GT(r.count, 0) << "shard " << s;
      EXPECT_GE(r.begin, 0) << "shard " << s;
      EXPECT_LE(r.end(), p.total_elements()) << "shard " << s;
      for (int64_t i = r.begin; i < r.end() && i < p.total_elements(); ++i) {
        ++owned[static_cast<std::size_t>(i)];
      }
      size += r.count;
    }
    EXPECT_EQ(p.shard_size(s), size) << "shard " << s;
  }
  return owned;
}

void ExpectExactCover(const Placement& p) {
  const std::vector<int> owned = Coverage(p);
  for (std::size_t i = 0; i < owned.size(); ++i) {
    ASSERT_EQ(owned[i], 1) << "element " << i << " in " << p.Describe();
  }
}

// ---- Each policy on a layout small enough to work out by hand ------------------------

// Contiguous pieces whose sizes differ by at most one, the first total % n one larger,
// regardless of tensor boundaries.
TEST(Placement, EvenSplitSizesDifferByAtMostOne) {
  const Placement p = Build(SixTensors(), 4, PlacementPolicy::kEvenSplit);  // 30 elements
  EXPECT_THAT(p.ranges(0), ElementsAre(Range{0, 8}));
  EXPECT_THAT(p.ranges(1), ElementsAre(Range{8, 8}));
  EXPECT_THAT(p.ranges(2), ElementsAre(Range{16, 7}));
  EXPECT_THAT(p.ranges(3), ElementsAre(Range{23, 7}));
  for (int shards = 1; shards <= 31; ++shards) {
    const Placement q = Build(SixTensors(), shards, PlacementPolicy::kEvenSplit);
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
    for (int s = 0; s < shards; ++s) {
      lo = std::min(lo, q.shard_size(s));
      hi = std::max(hi, q.shard_size(s));
    }
    EXPECT_LE(hi - lo, 1) << q.Describe();
    ExpectExactCover(q);
  }
}

// Tensor t whole on shard t mod n, ranges in layout order; adjacent ones merge.
TEST(Placement, RoundRobinPlacesTensorTOnShardTModN) {
  const Placement p = Build(SixTensors(), 4, PlacementPolicy::kRoundRobin);
  EXPECT_THAT(p.ranges(0), ElementsAre(Range{0, 10}, Range{21, 8}));  // t0, t4
  EXPECT_THAT(p.ranges(1), ElementsAre(Range{10, 4}, Range{29, 1}));  // t1, t5
  EXPECT_THAT(p.ranges(2), ElementsAre(Range{14, 4}));                // t2
  EXPECT_THAT(p.ranges(3), ElementsAre(Range{18, 3}));                // t3
  const Placement one = Build(SixTensors(), 1, PlacementPolicy::kRoundRobin);
  EXPECT_THAT(one.ranges(0), ElementsAre(Range{0, 30}));  // merged into one range
}

// Worked by hand: tensors of 10, 4, 4, 3, 8, 1 elements over 3 shards, each whole on the
// least-loaded shard at its turn, ties to the lowest index.
//   t0 (10): loads 0 0 0    -> shard 0   loads 10 0 0
//   t1 (4):                 -> shard 1   loads 10 4 0
//   t2 (4):                 -> shard 2   loads 10 4 4
//   t3 (3):  tie 1 / 2      -> shard 1   loads 10 7 4
//   t4 (8):                 -> shard 2   loads 10 7 12
//   t5 (1):                 -> shard 1   loads 10 8 12
TEST(Placement, GreedyBytesPutsEachTensorOnTheLeastLoadedShard) {
  const Placement p = Build(SixTensors(), 3, PlacementPolicy::kGreedyBytes);
  EXPECT_THAT(p.ranges(0), ElementsAre(Range{0, 10}));
  EXPECT_THAT(p.ranges(1), ElementsAre(Range{10, 4}, Range{18, 3}, Range{29, 1}));
  EXPECT_THAT(p.ranges(2), ElementsAre(Range{14, 4}, Range{21, 8}));
  EXPECT_EQ(p.shard_size(0), 10);
  EXPECT_EQ(p.shard_size(1), 8);
  EXPECT_EQ(p.shard_size(2), 12);
}

// Worked by hand: "a" (4), "emb" [10 x 3] (the largest), "b" (5) over 4 shards.
//   a:   greedy             -> shard 0 [0,4)                   loads 4 0 0 0
//   emb: 10 rows in 4 pieces of 3, 3, 2, 2 rows (10 mod 4 = 2 pieces one row larger),
//        piece k on shard k -> [4,13) [13,22) [22,28) [28,34)  loads 13 9 6 6
//   b:   greedy, tie 2 / 3  -> shard 2 [34,39)                 loads 13 9 11 6
TEST(Placement, PartitionLargeSplitsTheLargestTensorByRows) {
  ParamLayout layout;
  layout.Add("a", {4});
  layout.Add("emb", {10, 3});
  layout.Add("b", {5});
  const Placement p = Build(layout, 4, PlacementPolicy::kPartitionLarge);
  EXPECT_THAT(p.ranges(0), ElementsAre(Range{0, 13}));  // a and piece 0, merged
  EXPECT_THAT(p.ranges(1), ElementsAre(Range{13, 9}));
  EXPECT_THAT(p.ranges(2), ElementsAre(Range{22, 6}, Range{34, 5}));
  EXPECT_THAT(p.ranges(3), ElementsAre(Range{28, 6}));
}

// Fewer rows than shards: one row per piece, pieces on the first shards only.
TEST(Placement, PartitionLargeMakesNoMorePiecesThanRows) {
  ParamLayout layout;
  layout.Add("w", {2, 5});
  layout.Add("b", {3});
  const Placement p = Build(layout, 4, PlacementPolicy::kPartitionLarge);
  EXPECT_THAT(p.ranges(0), ElementsAre(Range{0, 5}));
  EXPECT_THAT(p.ranges(1), ElementsAre(Range{5, 5}));
  EXPECT_THAT(p.ranges(2), ElementsAre(Range{10, 3}));  // b, greedy: shards 2 and 3 empty
  EXPECT_TRUE(p.ranges(3).empty());
}

// With a threshold every tensor at or above it is partitioned; without one only the
// first of equally large tensors.
TEST(Placement, PartitionLargeThresholdAndTies) {
  ParamLayout layout;
  layout.Add("x", {4, 2});  // 8
  layout.Add("y", {4, 2});  // 8, as large as x
  // x in two pieces (loads 4 4), then y whole on the least-loaded shard: the tie goes to 0.
  const Placement largest = Build(layout, 2, PlacementPolicy::kPartitionLarge);
  EXPECT_THAT(largest.ranges(0), ElementsAre(Range{0, 4}, Range{8, 8}));
  EXPECT_THAT(largest.ranges(1), ElementsAre(Range{4, 4}));
  const Placement both = Build(layout, 2, PlacementPolicy::kPartitionLarge, 8);
  EXPECT_THAT(both.ranges(0), ElementsAre(Range{0, 4}, Range{8, 4}));
  EXPECT_THAT(both.ranges(1), ElementsAre(Range{4, 4}, Range{12, 4}));
  try {
    Build(layout, 2, PlacementPolicy::kPartitionLarge, -1);
    FAIL() << "negative threshold accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "cluster.partition_min_elements");
  }
}

// A tensor larger than an even share still goes whole to one shard under the
// whole-tensor policies (the shard is simply larger); even split cuts through it.
TEST(Placement, TensorLargerThanAShard) {
  ParamLayout layout;
  layout.Add("big", {100});
  layout.Add("s1", {1});
  layout.Add("s2", {1});
  for (auto policy : {PlacementPolicy::kGreedyBytes, PlacementPolicy::kRoundRobin}) {
    const Placement p = Build(layout, 3, policy);
    EXPECT_THAT(p.ranges(0), ElementsAre(Range{0, 100})) << PlacementPolicyName(policy);
    EXPECT_THAT(p.ranges(1), ElementsAre(Range{100, 1}));
    EXPECT_THAT(p.ranges(2), ElementsAre(Range{101, 1}));
  }
  const Placement even = Build(layout, 3, PlacementPolicy::kEvenSplit);
  EXPECT_THAT(even.ranges(0), ElementsAre(Range{0, 34}));
  EXPECT_THAT(even.ranges(2), ElementsAre(Range{68, 34}));
}

// More shards than tensors (or elements): the extra shards own nothing, which is valid.
TEST(Placement, MoreShardsThanTensorsLeavesEmptyShards) {
  ParamLayout layout;
  layout.Add("a", {3});
  layout.Add("b", {2});
  for (auto policy : {PlacementPolicy::kRoundRobin, PlacementPolicy::kGreedyBytes,
                      PlacementPolicy::kEvenSplit, PlacementPolicy::kPartitionLarge}) {
    const Placement p = Build(layout, 8, policy);
    SCOPED_TRACE(PlacementPolicyName(policy));
    EXPECT_EQ(p.num_shards(), 8);
    ExpectExactCover(p);
    EXPECT_TRUE(p.ranges(7).empty());
    EXPECT_EQ(p.shard_size(7), 0);
    EXPECT_THAT(p.Describe(), HasSubstr("7:(empty)"));
    EXPECT_TRUE(p.Gather(7, std::vector<float>(5)).empty());
  }
}

TEST(Placement, BuildRejectsNoShardsAndEmptyLayouts) {
  try {
    Build(SixTensors(), 0, PlacementPolicy::kEvenSplit);
    FAIL() << "0 shards accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "cluster.ps");
  }
  EXPECT_THROW(Build(ParamLayout(), 2, PlacementPolicy::kEvenSplit), ConfigError);
}

// ---- Properties over many random layouts ---------------------------------------------

// Every policy, on random layouts and shard counts (seeded, so failures reproduce),
// covers each element exactly once and keeps its own promise about tensors.
TEST(Placement, EveryPolicyCoversEveryElementExactlyOnce) {
  Rng rng(20240611);
  for (int iter = 0; iter < 300; ++iter) {
    ParamLayout layout;
    const int tensors = 1 + static_cast<int>(rng.UniformInt(8));
    for (int t = 0; t < tensors; ++t) {
      std::vector<int64_t> shape(rng.UniformInt(4));  // 0 to 3 dimensions
      for (auto& d : shape) d = 1 + static_cast<int64_t>(rng.UniformInt(9));
      // Not "t" + to_string(t): GCC 12 at -O2 reports a false -Wrestrict on a one-character
      // literal + string&&.
      layout.Add(internal::StrCat("t", t), shape);
    }
    const int shards = 1 + static_cast<int>(rng.UniformInt(10));
    for (auto policy : {PlacementPolicy::kEvenSplit, PlacementPolicy::kRoundRobin,
                        PlacementPolicy::kGreedyBytes, PlacementPolicy::kPartitionLarge}) {
      const int64_t threshold =
          policy == PlacementPolicy::kPartitionLarge ? static_cast<int64_t>(rng.UniformInt(30)) : 0;
      const Placement p = Build(layout, shards, policy, threshold);
      SCOPED_TRACE(layout.Describe() + " / " + std::string(PlacementPolicyName(policy)) + " / " +
                   std::to_string(shards) + " shards, threshold " + std::to_string(threshold));
      ASSERT_EQ(p.num_shards(), shards);
      ASSERT_EQ(p.total_elements(), layout.size());
      ExpectExactCover(p);
      if (HasFailure()) return;
      if (policy == PlacementPolicy::kRoundRobin || policy == PlacementPolicy::kGreedyBytes) {
        // Whole tensors: each tensor lies inside one range of one shard.
        for (int t = 0; t < tensors; ++t) {
          const TensorSpec& spec = layout.tensor(t);
          int holders = 0;
          for (int s = 0; s < shards; ++s) {
            for (const Range& r : p.ranges(s)) {
              if (r.begin <= spec.offset && spec.offset + spec.size <= r.end()) {
                ++holders;
                if (policy == PlacementPolicy::kRoundRobin) {
                  EXPECT_EQ(s, t % shards);
                }
              }
            }
          }
          EXPECT_EQ(holders, 1) << spec.name;
        }
      }
    }
  }
}

// ---- Gather / Scatter ------------------------------------------------------------------

// Gather copies a shard's elements out in shard-local order and Scatter puts them back:
// together they reproduce the flat vector exactly, for every policy.
TEST(Placement, GatherScatterRoundTrip) {
  const ParamLayout layout = SixTensors();
  std::vector<float> flat(static_cast<std::size_t>(layout.size()));
  std::iota(flat.begin(), flat.end(), 1.0f);
  for (auto policy : {PlacementPolicy::kEvenSplit, PlacementPolicy::kRoundRobin,
                      PlacementPolicy::kGreedyBytes, PlacementPolicy::kPartitionLarge}) {
    const Placement p = Build(layout, 3, policy);
    std::vector<float> back(flat.size(), 0.0f);
    for (int s = 0; s < p.num_shards(); ++s) {
      const std::vector<float> values = p.Gather(s, flat);
      ASSERT_EQ(static_cast<int64_t>(values.size()), p.shard_size(s));
      std::size_t at = 0;
      for (const Range& r : p.ranges(s)) {
        for (int64_t i = r.begin; i < r.end(); ++i) EXPECT_EQ(values[at++], flat[i]);
      }
      p.Scatter(s, values, back);
    }
    EXPECT_EQ(back, flat) << PlacementPolicyName(policy);
  }
}

// Shard-local order is the order of the shard's ranges, not global order.
TEST(Placement, GatherFollowsTheShardsRangeOrder) {
  const Placement p = Placement::FromRanges(6, {{{3, 3}, {0, 3}}});
  const std::vector<float> flat = {0, 1, 2, 3, 4, 5};
  EXPECT_THAT(p.Gather(0, flat), ElementsAre(3, 4, 5, 0, 1, 2));
  std::vector<float> back(6, -1.0f);
  p.Scatter(0, std::vector<float>{30, 40, 50, 0, 10, 20}, back);
  EXPECT_THAT(back, ElementsAre(0, 10, 20, 30, 40, 50));
}

TEST(Placement, GatherAndScatterCheckSizes) {
  const Placement p = Build(SixTensors(), 2, PlacementPolicy::kEvenSplit);
  EXPECT_THROW(p.Gather(0, std::vector<float>(29)), InvariantError);
  std::vector<float> flat(30);
  EXPECT_THROW(p.Scatter(0, std::vector<float>(14), flat), InvariantError);
  EXPECT_THROW(p.Gather(2, flat), InvariantError);  // no shard 2
}

// ---- FromRanges ------------------------------------------------------------------------

// Ranges from outside (a coordinator) are checked: an overlap would apply pushes twice,
// a gap would silently drop them.
TEST(Placement, FromRangesRejectsOverlapsGapsAndStrays) {
  auto rejects = [](int64_t total, std::vector<std::vector<Range>> shards,
                    const std::string& message) {
    try {
      Placement::FromRanges(total, std::move(shards));
      ADD_FAILURE() << "accepted; expected: " << message;
    } catch (const InvariantError& e) {
      EXPECT_THAT(e.what(), HasSubstr(message));
    }
  };
  rejects(10, {{{0, 5}}, {{4, 6}}}, "element 4 placed twice");
  rejects(10, {{{0, 4}}, {{5, 5}}}, "elements from 4 not placed");
  rejects(10, {{{0, 5}}}, "elements from 5 to 10 not placed");
  rejects(10, {{{0, 5}, {5, 0}}, {{5, 5}}}, "outside");   // an empty range
  rejects(10, {{{0, 5}}, {{5, 6}}}, "outside");           // past the end
  rejects(10, {{{-1, 1}, {0, 10}}}, "outside");           // before the start
  // Counts so large that begin + count, or the shard's sum, would overflow int64.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  rejects(10, {{{1, kMax}}, {{0, 1}}}, "outside");
  rejects(10, {{{0, 10}, {5, kMax - 2}}}, "outside");
  EXPECT_NO_THROW(Placement::FromRanges(10, {{{5, 5}}, {}, {{0, 5}}}));
}

TEST(Placement, EqualPlacementsCompareEqual) {
  EXPECT_EQ(Build(SixTensors(), 3, PlacementPolicy::kGreedyBytes),
            Placement::FromRanges(30, {{{0, 10}}, {{10, 4}, {18, 3}, {29, 1}},
                                       {{14, 4}, {21, 8}}}));
}

// ---- Policy names ----------------------------------------------------------------------

TEST(PlacementPolicyNames, ParseRoundTripsEveryName) {
  for (auto policy : {PlacementPolicy::kEvenSplit, PlacementPolicy::kRoundRobin,
                      PlacementPolicy::kGreedyBytes, PlacementPolicy::kPartitionLarge}) {
    EXPECT_EQ(ParsePlacementPolicy(PlacementPolicyName(policy)), policy);
  }
}

// A bad name names the config key it came from, so the user knows what to fix.
TEST(PlacementPolicyNames, ParseErrorNamesTheKey) {
  for (const std::string key : {"cluster.placement", "ps.policy"}) {
    try {
      ParsePlacementPolicy("evenly", key);
      FAIL() << "accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.key(), key);
      EXPECT_EQ(e.value(), "evenly");
      EXPECT_THAT(e.what(), HasSubstr("round_robin"));
    }
  }
  EXPECT_THROW(ParsePlacementPolicy("Even"), ConfigError);
  EXPECT_THROW(ParsePlacementPolicy(""), ConfigError);
}

}  // namespace
}  // namespace asgd::ps
