#include "datasets/partition.h"

#include <algorithm>
#include <numeric>
#include <span>
#include <string>
#include <utility>

#include "core/check.h"
#include "core/error.h"
#include "core/rng.h"

namespace asgd::datasets {
namespace {

void ValidatePartition(int64_t num_examples, int num_shards) {
  if (num_shards < 1 || num_shards > num_examples) {
    throw ConfigError("cannot split " + std::to_string(num_examples) + " examples into " +
                      std::to_string(num_shards) +
                      " worker shards: expected between 1 and one worker per example");
  }
}

// [begin, end) of shard s in the shuffled order.
std::pair<int64_t, int64_t> ShardRange(int64_t n, int num_shards, int s) {
  const int64_t base = n / num_shards;
  const int64_t extra = n % num_shards;
  const int64_t begin = s * base + std::min<int64_t>(s, extra);
  return {begin, begin + base + (s < extra ? 1 : 0)};
}

}  // namespace

std::vector<int64_t> AllIndices(int64_t n) {
  ASGD_CHECK_GE(n, 0);
  std::vector<int64_t> out(static_cast<std::size_t>(n));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

std::vector<int64_t> ShuffledIndices(int64_t n, uint64_t seed) {
  std::vector<int64_t> out = AllIndices(n);
  Rng rng(seed);
  rng.Shuffle(std::span<int64_t>(out));
  return out;
}

std::vector<int64_t> SampleIndices(int64_t n, int64_t k, uint64_t seed) {
  ASGD_CHECK(k >= 0 && k <= n, k, " of ", n, " examples");
  std::vector<int64_t> out = ShuffledIndices(n, seed);
  out.resize(static_cast<std::size_t>(k));
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::vector<int64_t>> PartitionIndices(int64_t num_examples, int num_shards,
                                                   uint64_t seed) {
  ValidatePartition(num_examples, num_shards);
  std::vector<int64_t> order = ShuffledIndices(num_examples, DeriveSeed(seed, "partition"));
  std::vector<std::vector<int64_t>> shards(static_cast<std::size_t>(num_shards));
  for (int s = 0; s < num_shards; ++s) {
    auto [begin, end] = ShardRange(num_examples, num_shards, s);
    shards[static_cast<std::size_t>(s)].assign(order.begin() + begin, order.begin() + end);
  }
  return shards;
}

std::vector<int64_t> ShardIndices(int64_t num_examples, int num_shards, int shard, uint64_t seed) {
  ValidatePartition(num_examples, num_shards);
  ASGD_CHECK(shard >= 0 && shard < num_shards, "shard ", shard, " of ", num_shards);
  std::vector<int64_t> order = ShuffledIndices(num_examples, DeriveSeed(seed, "partition"));
  auto [begin, end] = ShardRange(num_examples, num_shards, shard);
  return std::vector<int64_t>(order.begin() + begin, order.begin() + end);
}

}  // namespace asgd::datasets
