#include "algorithms/strategy.h"

#include <algorithm>
#include <map>

#include "algorithms/builtin_strategies.h"
#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "ps/placement.h"

namespace asgd::algorithms {
namespace {

// The sequential baseline: experiments/run/runner.cc trains it (one worker, no store).
Strategy SgdStrategy() {
  Strategy s;
  s.name = "sgd";
  s.description = "sequential mini-batch SGD: the single-worker baseline";
  s.sequential = true;
  s.can_simulate = false;
  s.keys = ReadKeys(kOptimizerKeys, {"algorithm.lr_decay"});
  return s;
}

const std::map<std::string, Strategy>& Registry() {
  static const auto* registry = [] {
    auto* m = new std::map<std::string, Strategy>();
    for (Strategy s :
         {SgdStrategy(), AsyncSgdStrategy(), HogwildStrategy(), DownpourStrategy(), AgnStrategy(),
          DynSgdStrategy(), AdagDistanceStrategy(), SyncSgdStrategy(), SagnStrategy(),
          EasgdStrategy(), AeasgdStrategy(), AeamsgdStrategy(), StalenessAwareStrategy(),
          SspStrategy(), ModelAveragingStrategy(), DcAsgdStrategy(), AllreduceSgdStrategy(),
          LocalSgdStrategy(), DpsgdStrategy(), SignSgdVoteStrategy()}) {
      (*m)[s.name] = s;
    }
    // dist-keras calls AGN "ADAG" (docs/algorithms.md#notation); the alias keeps its configs
    // working.
    (*m)["adag"] = (*m)["agn"];
    return m;
  }();
  return *registry;
}

}  // namespace

Status ParamClient::Pull(std::span<float> out) {
  Status st = DoPull(out);
  if (st.ok()) traffic_.bytes_pulled += static_cast<int64_t>(out.size_bytes());
  return st;
}

Status ParamClient::Push(std::span<const float> update, int64_t step) {
  Status st = DoPush(update, step);
  if (st.ok()) {
    traffic_.bytes_pushed += static_cast<int64_t>(update.size_bytes());
    traffic_.dense_bytes_pushed += static_cast<int64_t>(update.size_bytes());
  }
  return st;
}

std::vector<PushPart> PushPartsOf(const transport::Placement& placement) {
  std::vector<PushPart> parts(static_cast<std::size_t>(placement.num_shards()));
  for (int s = 0; s < placement.num_shards(); ++s) {
    PushPart& part = parts[static_cast<std::size_t>(s)];
    for (const Range& r : placement.ranges(s)) part.ranges.push_back(r);
    part.count = placement.shard_size(s);
  }
  return parts;
}

std::vector<PushPart> ParamClient::PushParts() const {
  return {PushPart{{Range{0, size()}}, size()}};
}

Status ParamClient::PushEncoded(std::span<const compression::Encoded> parts, std::span<float> out,
                                int64_t step) {
  Status st = DoPushEncoded(parts, out, step);
  if (st.ok()) {
    for (const compression::Encoded& e : parts) {
      traffic_.bytes_pushed += e.bytes();
      traffic_.dense_bytes_pushed += e.count * static_cast<int64_t>(sizeof(float));
    }
    traffic_.bytes_pulled += static_cast<int64_t>(out.size_bytes());
  }
  return st;
}

Status ParamClient::DoPushEncoded(std::span<const compression::Encoded> /*parts*/,
                                  std::span<float> /*out*/, int64_t /*step*/) {
  ASGD_CHECK(false, "this ParamClient does not take compressed pushes (TakesEncodedPushes)");
}

Status ParamClient::PushPull(std::span<const float> update, std::span<float> out, int64_t step) {
  Status st = DoPushPull(update, out, step);
  if (st.ok()) {
    traffic_.bytes_pushed += static_cast<int64_t>(update.size_bytes());
    traffic_.dense_bytes_pushed += static_cast<int64_t>(update.size_bytes());
    traffic_.bytes_pulled += static_cast<int64_t>(out.size_bytes());
  }
  return st;
}

Status ParamClient::PullSparse(std::span<const int64_t> indices, std::span<float> out) {
  Status st = DoPullSparse(indices, out);
  if (st.ok()) traffic_.bytes_pulled += static_cast<int64_t>(indices.size() * sizeof(float));
  return st;
}

Status ParamClient::PushSparse(std::span<const int64_t> indices, std::span<const float> values,
                               int64_t step) {
  ASGD_CHECK_EQ(indices.size(), values.size(), "sparse push");
  Status st = DoPushSparse(indices, values, step);
  if (st.ok()) {
    traffic_.bytes_pushed +=
        static_cast<int64_t>(indices.size() * (sizeof(int64_t) + sizeof(float)));
    traffic_.dense_bytes_pushed +=
        static_cast<int64_t>(indices.size() * (sizeof(int64_t) + sizeof(float)));
  }
  return st;
}

Status ParamClient::DoPullSparse(std::span<const int64_t> indices, std::span<float> out) {
  (void)indices;  // a dense pull reads every coordinate, the listed ones included
  return DoPull(out);
}

Status ParamClient::DoPushSparse(std::span<const int64_t> indices, std::span<const float> values,
                                 int64_t step) {
  std::vector<float> dense(static_cast<std::size_t>(size()), 0.0f);
  for (std::size_t i = 0; i < indices.size(); ++i) {
    ASGD_CHECK(indices[i] >= 0 && indices[i] < size(), "sparse index ", indices[i], " outside [0, ",
               size(), ")");
    dense[static_cast<std::size_t>(indices[i])] += values[i];
  }
  return DoPush(dense, step);
}

std::vector<std::string> ReadKeys(unsigned groups, std::initializer_list<const char*> own) {
  std::vector<std::string> keys = {"algorithm.name", "algorithm.workers", "algorithm.batch_size",
                                   "algorithm.learning_rate"};
  if (groups & kOptimizerKeys) {
    for (const char* k :
         {"algorithm.optimizer", "algorithm.momentum", "algorithm.beta1", "algorithm.beta2",
          "algorithm.epsilon", "algorithm.initial_accumulator", "algorithm.weight_decay"}) {
      keys.emplace_back(k);
    }
  }
  if (groups & kScheduleKeys) {
    for (const char* k : {"algorithm.lr_decay", "algorithm.linear_scaling",
                          "algorithm.warmup_epochs", "algorithm.worker_learning_rates"}) {
      keys.emplace_back(k);
    }
  }
  for (const char* k : own) keys.emplace_back(k);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

std::vector<std::string> AllStrategyKeys() {
  std::vector<std::string> all;
  for (const Strategy* s : Strategies()) all.insert(all.end(), s->keys.begin(), s->keys.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

std::vector<const Strategy*> Strategies() {
  std::vector<const Strategy*> out;
  for (const auto& [name, s] : Registry()) {
    if (name == s.name) out.push_back(&s);  // an alias is registered under another name
  }
  return out;
}

const Strategy& FindStrategy(const std::string& name) {
  const auto& r = Registry();
  auto it = r.find(name);
  if (it == r.end()) {
    throw ConfigError("algorithm.name", name, "one of " + Join(StrategyNames(), ", "));
  }
  return it->second;
}

std::vector<std::string> StrategyNames() {
  std::vector<std::string> names;
  for (const auto& [name, s] : Registry()) names.push_back(name);
  return names;
}

}  // namespace asgd::algorithms
