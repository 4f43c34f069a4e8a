// BucketedAllreduce: buckets cut from the vector's end, each reduced on the communication
// thread once its elements are reported, the result that of one Allreduce of the whole
// vector; N ranks as threads over gloo's TCP transport on 127.0.0.1 (run_ranks.h).

#include "collective/bucketed_allreduce.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/rng.h"
#include "tests/collective/run_ranks.h"

namespace asgd::collective {
namespace {

using testing::RunRanks;

TEST(ReverseBuckets, CutsFromTheEndWithTheShortBucketFirstInMemory) {
  EXPECT_EQ(ReverseBuckets(10, 4), (std::vector<Range>{{6, 4}, {2, 4}, {0, 2}}));
  EXPECT_EQ(ReverseBuckets(8, 4), (std::vector<Range>{{4, 4}, {0, 4}}));
  // A bucket larger than the vector: one bucket, the whole vector.
  EXPECT_EQ(ReverseBuckets(5, 1000), (std::vector<Range>{{0, 5}}));
  EXPECT_TRUE(ReverseBuckets(0, 4).empty());
  EXPECT_THROW(ReverseBuckets(10, 0), InvariantError);
}

// Rank r's gradient: pseudo-random floats of mixed magnitude, so that the summation order
// matters to the bits (small integers would hide it).
std::vector<float> Gradient(int rank, std::size_t n, uint64_t round) {
  Rng rng(1000 * static_cast<uint64_t>(rank) + round);
  std::vector<float> g(n);
  for (float& x : g) x = static_cast<float>(rng.Normal() * std::exp(3.0 * rng.Uniform()));
  return g;
}

// "Layers" of a model of n floats as backward reports them, the last first: sizes chosen
// so that some layers span several buckets and some buckets hold several layers.
std::vector<Range> LayersLastFirst(int64_t n, const std::vector<int64_t>& sizes) {
  std::vector<Range> layers;
  int64_t begin = 0;
  for (int64_t s : sizes) {
    layers.push_back({begin, s});
    begin += s;
  }
  EXPECT_EQ(begin, n);
  return {layers.rbegin(), layers.rend()};
}

class BucketedAllreduceTest : public ::testing::TestWithParam<std::tuple<Algorithm, int>> {};

// Against Allreduce of the whole vector, over three rounds on one object: buckets smaller
// than a layer, larger than a layer, and larger than the whole vector; kMean and kSum.
TEST_P(BucketedAllreduceTest, EqualsTheWholeVectorsAllreduceWithinRounding) {
  // Named copies, not a structured binding: clang 14 cannot capture bindings in lambdas.
  const Algorithm algorithm = std::get<0>(GetParam());
  const int size = std::get<1>(GetParam());
  constexpr int64_t kN = 3001;
  const std::vector<Range> layers = LayersLastFirst(kN, {1200, 7, 1500, 294});
  for (const int64_t bucket : {int64_t{256}, int64_t{1400}, int64_t{5000}}) {
    for (const ReduceOp op : {ReduceOp::kMean, ReduceOp::kSum}) {
      RunRanks(size, algorithm, [&](Collective& c) {
        std::vector<float> data(kN);
        BucketedAllreduce bucketed(c, data, bucket, op);
        EXPECT_EQ(bucketed.buckets(), ReverseBuckets(kN, bucket));
        for (uint64_t round = 0; round < 3; ++round) {
          std::vector<float> whole = Gradient(c.rank(), kN, round);
          data = whole;  // same storage: assignment of equal length
          bucketed.Start();
          for (const Range& r : layers) bucketed.Ready(r);
          bucketed.Wait();
          c.Allreduce(whole, op);
          for (int64_t i = 0; i < kN; ++i) {
            const auto k = static_cast<std::size_t>(i);
            ASSERT_NEAR(data[k], whole[k], 1e-5f * (1.0f + std::abs(whole[k])))
                << "element " << i << ", bucket " << bucket;
          }
          // Two ranks add two numbers, in either order the same bits; so does one rank.
          if (size <= 2) {
            ASSERT_EQ(std::memcmp(data.data(), whole.data(), kN * sizeof(float)), 0)
                << "bucket " << bucket;
          }
        }
      });
    }
  }
}

// Ranges reported in a different order on each rank (first layer first on even ranks):
// the buckets still go out in bucket order, so the ranks' calls stay matched.
TEST_P(BucketedAllreduceTest, ReportOrderDoesNotMatter) {
  // Named copies, not a structured binding: clang 14 cannot capture bindings in lambdas.
  const Algorithm algorithm = std::get<0>(GetParam());
  const int size = std::get<1>(GetParam());
  constexpr int64_t kN = 1000;
  std::vector<Range> layers = LayersLastFirst(kN, {100, 400, 300, 200});
  RunRanks(size, algorithm, [&](Collective& c) {
    std::vector<float> data(kN);
    BucketedAllreduce bucketed(c, data, 128, ReduceOp::kSum);
    for (int64_t i = 0; i < kN; ++i) data[static_cast<std::size_t>(i)] = static_cast<float>(i);
    bucketed.Start();
    if (c.rank() % 2 == 0) {
      for (auto it = layers.rbegin(); it != layers.rend(); ++it) bucketed.Ready(*it);
    } else {
      for (const Range& r : layers) bucketed.Ready(r);
    }
    bucketed.Wait();
    for (int64_t i = 0; i < kN; ++i) {
      ASSERT_EQ(data[static_cast<std::size_t>(i)], static_cast<float>(size * i));
    }
  });
}

// The overlap itself: the first bucket is reduced while the rest of the vector has not
// been reported yet.
TEST_P(BucketedAllreduceTest, TheFirstBucketIsReducedBeforeTheRestIsReady) {
  // Named copies, not a structured binding: clang 14 cannot capture bindings in lambdas.
  const Algorithm algorithm = std::get<0>(GetParam());
  const int size = std::get<1>(GetParam());
  constexpr int64_t kN = 600;
  RunRanks(size, algorithm, [&](Collective& c) {
    std::vector<float> data(kN, 1.0f);
    BucketedAllreduce bucketed(c, data, 200, ReduceOp::kSum);
    const uint64_t before = c.Counters().allreduces;
    bucketed.Start();
    bucketed.Ready({400, 200});  // bucket 0
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (c.Counters().allreduces == before && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(c.Counters().allreduces, before + 1) << "bucket 0 was not reduced on its own";
    // Bucket 0's values are read after Wait: gloo's thread writes them, and the counter
    // (an atomic read without ordering) does not publish them.
    EXPECT_EQ(data[100], 1.0f);  // bucket 2: not reduced yet (nobody writes it)
    bucketed.Ready({0, 400});
    bucketed.Wait();
    EXPECT_EQ(c.Counters().allreduces, before + 3);
    EXPECT_EQ(data[450], static_cast<float>(size));
    EXPECT_EQ(data[100], static_cast<float>(size));
  });
}

std::string ParamName(const ::testing::TestParamInfo<std::tuple<Algorithm, int>>& info) {
  return std::string(AlgorithmName(std::get<0>(info.param))) + "_" +
         std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(AlgorithmsAndSizes, BucketedAllreduceTest,
                         ::testing::Combine(::testing::Values(Algorithm::kRing,
                                                              Algorithm::kRingChunked,
                                                              Algorithm::kHalvingDoubling),
                                            ::testing::Values(1, 2, 3, 4)),
                         ParamName);

// A round whose vector was not wholly reported fails at Wait instead of hanging, and a
// range reported twice is refused.
TEST(BucketedAllreduce, WaitWithoutEveryElementReportedFails) {
  RunRanks(1, Algorithm::kRing, [](Collective& c) {
    std::vector<float> data(10, 1.0f);
    BucketedAllreduce bucketed(c, data, 4, ReduceOp::kSum);
    bucketed.Start();
    bucketed.Ready({6, 4});
    EXPECT_THROW(bucketed.Ready({7, 2}), InvariantError);
    EXPECT_THROW(bucketed.Wait(), InvariantError);
    EXPECT_THROW(bucketed.Ready({0, 11}), InvariantError);
  });
}

}  // namespace
}  // namespace asgd::collective
