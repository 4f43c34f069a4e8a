#include "ps/placement.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/check.h"
#include "core/error.h"

namespace asgd::ps {

std::string_view PlacementPolicyName(PlacementPolicy policy) {
  switch (policy) {
    case PlacementPolicy::kEvenSplit: return "even";
    case PlacementPolicy::kRoundRobin: return "round_robin";
    case PlacementPolicy::kGreedyBytes: return "greedy";
    case PlacementPolicy::kPartitionLarge: return "partition";
  }
  return "unknown";
}

PlacementPolicy ParsePlacementPolicy(std::string_view text, std::string_view key) {
  for (auto p : {PlacementPolicy::kEvenSplit, PlacementPolicy::kRoundRobin,
                 PlacementPolicy::kGreedyBytes, PlacementPolicy::kPartitionLarge}) {
    if (text == PlacementPolicyName(p)) return p;
  }
  throw ConfigError(std::string(key), std::string(text),
                    "one of even, round_robin, greedy, partition");
}

namespace {

void Append(std::vector<Range>& ranges, Range r) {
  if (r.count == 0) return;
  if (!ranges.empty() && ranges.back().end() == r.begin) {
    ranges.back().count += r.count;
  } else {
    ranges.push_back(r);
  }
}

// Least loaded shard, ties to the lowest index (TensorFlow's GreedyLoadBalancingStrategy).
int LeastLoaded(const std::vector<int64_t>& load) {
  return static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
}

}  // namespace

Placement Placement::Build(const ParamLayout& layout, int num_shards,
                           const PlacementOptions& options) {
  if (num_shards < 1) {
    throw ConfigError("cluster.ps", std::to_string(num_shards), "at least one shard");
  }
  if (layout.size() == 0) {
    throw ConfigError("placement: the parameter layout is empty; nothing to place");
  }
  const auto n = static_cast<std::size_t>(num_shards);
  std::vector<std::vector<Range>> shards(n);
  std::vector<int64_t> load(n, 0);  // elements; bytes are 4x, same order
  const auto& tensors = layout.tensors();

  switch (options.policy) {
    case PlacementPolicy::kEvenSplit: {
      const int64_t total = layout.size();
      const int64_t base = total / num_shards;
      const int64_t extra = total % num_shards;
      int64_t begin = 0;
      for (int64_t s = 0; s < num_shards; ++s) {
        const int64_t count = base + (s < extra ? 1 : 0);
        Append(shards[static_cast<std::size_t>(s)], {begin, count});
        begin += count;
      }
      break;
    }
    case PlacementPolicy::kRoundRobin:
      for (std::size_t t = 0; t < tensors.size(); ++t) {
        Append(shards[t % n], {tensors[t].offset, tensors[t].size});
      }
      break;
    case PlacementPolicy::kGreedyBytes:
      for (const auto& t : tensors) {
        const int s = LeastLoaded(load);
        Append(shards[static_cast<std::size_t>(s)], {t.offset, t.size});
        load[static_cast<std::size_t>(s)] += t.size;
      }
      break;
    case PlacementPolicy::kPartitionLarge: {
      int64_t threshold = options.partition_min_elements;
      std::size_t largest = 0;
      for (std::size_t t = 1; t < tensors.size(); ++t) {
        if (tensors[t].size > tensors[largest].size) largest = t;
      }
      if (options.partition_min_elements < 0) {
        throw ConfigError("cluster.partition_min_elements",
                          std::to_string(options.partition_min_elements), "an integer >= 0");
      }
      for (std::size_t t = 0; t < tensors.size(); ++t) {
        const TensorSpec& spec = tensors[t];
        const bool partition = threshold > 0 ? spec.size >= threshold : t == largest;
        if (!partition) {
          const int s = LeastLoaded(load);
          Append(shards[static_cast<std::size_t>(s)], {spec.offset, spec.size});
          load[static_cast<std::size_t>(s)] += spec.size;
          continue;
        }
        const int64_t rows = spec.shape.empty() ? 1 : spec.shape[0];
        const int64_t row_size = spec.size / rows;
        const int64_t pieces = std::min<int64_t>(num_shards, rows);
        const int64_t base = rows / pieces;
        const int64_t extra = rows % pieces;
        int64_t row = 0;
        for (int64_t k = 0; k < pieces; ++k) {
          const int64_t r = base + (k < extra ? 1 : 0);
          Append(shards[static_cast<std::size_t>(k)], {spec.offset + row * row_size, r * row_size});
          load[static_cast<std::size_t>(k)] += r * row_size;
          row += r;
        }
      }
      break;
    }
  }
  return FromRanges(layout.size(), std::move(shards));
}

Placement Placement::FromRanges(int64_t total_elements, std::vector<std::vector<Range>> shards) {
  Placement p;
  p.total_ = total_elements;
  p.shards_ = std::move(shards);
  // Validate first: the ranges may come from a peer, and summing unchecked counts could
  // overflow. Once every range lies inside [0, total) exactly once, no sum can.
  p.Validate();
  p.sizes_.reserve(p.shards_.size());
  for (const auto& ranges : p.shards_) {
    int64_t size = 0;
    for (const Range& r : ranges) size += r.count;
    p.sizes_.push_back(size);
  }
  return p;
}

const std::vector<Range>& Placement::ranges(int shard) const {
  ASGD_CHECK(shard >= 0 && shard < num_shards(), "shard ", shard, " of ", num_shards());
  return shards_[static_cast<std::size_t>(shard)];
}

int64_t Placement::shard_size(int shard) const {
  ASGD_CHECK(shard >= 0 && shard < num_shards(), "shard ", shard, " of ", num_shards());
  return sizes_[static_cast<std::size_t>(shard)];
}

std::vector<float> Placement::Gather(int shard, std::span<const float> flat) const {
  ASGD_CHECK_EQ(static_cast<int64_t>(flat.size()), total_, "flat buffer vs placement size");
  std::vector<float> out(static_cast<std::size_t>(shard_size(shard)));
  std::size_t at = 0;
  for (const Range& r : ranges(shard)) {
    std::memcpy(out.data() + at, flat.data() + r.begin, static_cast<std::size_t>(r.count) * 4);
    at += static_cast<std::size_t>(r.count);
  }
  return out;
}

void Placement::Scatter(int shard, std::span<const float> shard_values,
                        std::span<float> flat) const {
  ASGD_CHECK_EQ(static_cast<int64_t>(flat.size()), total_, "flat buffer vs placement size");
  ASGD_CHECK_EQ(static_cast<int64_t>(shard_values.size()), shard_size(shard));
  std::size_t at = 0;
  for (const Range& r : ranges(shard)) {
    std::memcpy(flat.data() + r.begin, shard_values.data() + at,
                static_cast<std::size_t>(r.count) * 4);
    at += static_cast<std::size_t>(r.count);
  }
}

std::string Placement::Describe() const {
  std::ostringstream os;
  os << shards_.size() << " shards over " << total_ << " floats:";
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    os << " " << s << ":";
    if (shards_[s].empty()) os << "(empty)";
    for (const Range& r : shards_[s]) os << "[" << r.begin << "," << r.end() << ")";
  }
  return os.str();
}

void Placement::Validate() const {
  ASGD_CHECK_GE(total_, 0);
  std::vector<Range> all;
  for (std::size_t s = 0; s < shards_.size(); ++s) {
    for (const Range& r : shards_[s]) {
      // Written so that no sum can overflow: begin + count is formed only once both are
      // known to lie inside [0, total].
      ASGD_CHECK(r.begin >= 0 && r.count > 0 && r.begin <= total_ && r.count <= total_ - r.begin,
                 "shard ", s, " range begin ", r.begin, " count ", r.count, " outside [0,",
                 total_, ") or empty");
      all.push_back(r);
    }
  }
  std::sort(all.begin(), all.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  int64_t next = 0;
  for (const Range& r : all) {
    ASGD_CHECK(r.begin == next, r.begin < next ? "element " : "elements from ",
               r.begin < next ? r.begin : next, r.begin < next ? " placed twice" : " not placed");
    next = r.end();
  }
  ASGD_CHECK(next == total_, "elements from ", next, " to ", total_, " not placed");
}

}  // namespace asgd::ps
