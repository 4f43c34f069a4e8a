#include "algorithms/strategy.h"

#include <algorithm>
#include <map>

#include "algorithms/builtin_strategies.h"
#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

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
