// Splitting a dataset's examples among workers.
//
// Every worker can compute its own shard from (num_examples, num_shards, seed) alone, and
// gets the same answer as every other worker, so no process needs to send index lists.
#pragma once

#include <cstdint>
#include <vector>

namespace asgd::datasets {

// 0, 1, ..., n − 1. REQUIRES: n >= 0.
std::vector<int64_t> AllIndices(int64_t n);

// A permutation of [0, n) drawn from seed. REQUIRES: n >= 0.
std::vector<int64_t> ShuffledIndices(int64_t n, uint64_t seed);

// k distinct examples of [0, n), each set of k equally likely, drawn from seed: the first k
// of ShuffledIndices(n, seed), in ascending order. REQUIRES: 0 <= k <= n.
std::vector<int64_t> SampleIndices(int64_t n, int64_t k, uint64_t seed);

// Splits the examples [0, num_examples) into num_shards disjoint shards that together
// cover every example: the examples are shuffled with DeriveSeed(seed, "partition") and
// cut into contiguous runs, the first num_examples % num_shards of them one longer, so
// sizes differ by at most one. Each shard is in shuffled order (a BatchSampler reshuffles
// it anyway). The result depends only on the three arguments.
// Throws ConfigError if num_shards < 1 or num_shards > num_examples (a worker with no
// examples could not train).
std::vector<std::vector<int64_t>> PartitionIndices(int64_t num_examples, int num_shards,
                                                   uint64_t seed);

// Shard `shard` of PartitionIndices(num_examples, num_shards, seed), without building
// the others. REQUIRES: 0 <= shard < num_shards.
std::vector<int64_t> ShardIndices(int64_t num_examples, int num_shards, int shard, uint64_t seed);

}  // namespace asgd::datasets
