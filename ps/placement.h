// Placement: which parts of the flat parameter vector each shard owns
// (docs/architecture.md#the-flat-parameter-vector).
//
// A Placement maps a ParamLayout onto num_shards shards. Each shard owns an ordered list
// of global element ranges; the shard stores them back to back, so shard-local element
// i is the i-th element of the concatenation of its ranges (its "shard-local order").
// Policies mirror what TensorFlow users know:
//
//   kEvenSplit       the flat vector cut into num_shards contiguous pieces whose sizes
//                    differ by at most one element, ignoring tensor boundaries
//   kRoundRobin      tensor t on shard t mod num_shards, whole
//   kGreedyBytes     tensors in layout order, each whole on the least-loaded shard
//                    (by bytes; ties to the lowest index), as TensorFlow's
//                    GreedyLoadBalancingStrategy with byte_size_load_fn
//   kPartitionLarge  large tensors split along their first axis into one piece per shard
//                    (TensorFlow's fixed_size_partitioner(num_shards): the first
//                    dim0 mod num_shards pieces get one extra row; piece k on shard k),
//                    the other tensors placed as kGreedyBytes
//
// Every policy is deterministic and covers every element exactly once. Adjacent ranges
// of one shard are merged. A shard may own nothing (more shards than tensors under
// kRoundRobin); clients skip such shards.
//
// Thread safety: immutable once built.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/param_layout.h"

namespace asgd::ps {

enum class PlacementPolicy { kEvenSplit, kRoundRobin, kGreedyBytes, kPartitionLarge };

// "even", "round_robin", "greedy", "partition".
std::string_view PlacementPolicyName(PlacementPolicy policy);
// Parses the names above. Throws ConfigError naming key and text otherwise.
PlacementPolicy ParsePlacementPolicy(std::string_view text,
                                     std::string_view key = "cluster.placement");

struct PlacementOptions {
  PlacementPolicy policy = PlacementPolicy::kEvenSplit;
  // kPartitionLarge: tensors with at least this many elements are partitioned. 0
  // (default) partitions only the largest tensor (the first of equals).
  int64_t partition_min_elements = 0;
};

class Placement {
 public:
  Placement() = default;

  // Throws ConfigError if num_shards < 1 or the layout is empty.
  static Placement Build(const ParamLayout& layout, int num_shards,
                         const PlacementOptions& options = {});
  // A placement from explicit ranges (e.g. sent by a coordinator). Throws InvariantError
  // unless the ranges cover [0, total_elements) exactly once.
  static Placement FromRanges(int64_t total_elements, std::vector<std::vector<Range>> shards);

  int num_shards() const { return static_cast<int>(shards_.size()); }
  int64_t total_elements() const { return total_; }
  // Global ranges owned by shard, in shard-local order.
  const std::vector<Range>& ranges(int shard) const;
  // Elements owned by shard.
  int64_t shard_size(int shard) const;
  // Copies shard's elements out of / into a flat buffer (total_elements() floats), in
  // shard-local order. REQUIRES: sizes match (checked).
  std::vector<float> Gather(int shard, std::span<const float> flat) const;
  void Scatter(int shard, std::span<const float> shard_values, std::span<float> flat) const;

  // "3 shards over 1000 floats: 0:[0,334) 1:[334,667) 2:[667,1000)".
  std::string Describe() const;
  // Throws InvariantError naming the first element covered twice or not at all.
  void Validate() const;

  bool operator==(const Placement&) const = default;

 private:
  int64_t total_ = 0;
  std::vector<std::vector<Range>> shards_;
  std::vector<int64_t> sizes_;
};

}  // namespace asgd::ps
