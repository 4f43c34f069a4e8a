#include "algorithms/strategy.h"

#include <algorithm>
#include <map>

#include "algorithms/builtin_strategies.h"
#include "core/check.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/strings.h"

namespace asgd::algorithms {

// The sequential baseline: experiments/run/runner.cc trains it (one worker, no store).
Strategy SgdStrategy() {
  Strategy s;
  s.name = "sgd";
  s.description = "sequential mini-batch SGD: the single-worker baseline";
  s.family = Family::kSequential;
  s.can_simulate = false;
  s.keys = ReadKeys(kOptimizerKeys, {"algorithm.lr_decay"});
  return s;
}

namespace {

bool SameDeclaration(const Setting& a, const Setting& b) {
  return a.type == b.type && a.default_value == b.default_value && a.help == b.help &&
         a.unit == b.unit && a.choices == b.choices && a.min == b.min && a.max == b.max &&
         a.min_exclusive == b.min_exclusive && a.max_exclusive == b.max_exclusive &&
         static_cast<bool>(a.check) == static_cast<bool>(b.check);
}

// Each setting is declared once per strategy, under a name that is no central key's
// (ReadKeys' groups), and alike by every strategy that shares it.
void CheckSettings(const std::map<std::string, Strategy>& strategies) {
  const std::vector<std::string> central = ReadKeys(kOptimizerKeys | kScheduleKeys);
  std::map<std::string, const Setting*> seen;
  for (const auto& [name, strategy] : strategies) {
    std::vector<std::string> own;
    for (const Setting& setting : strategy.settings) {
      ASGD_CHECK(!setting.name.empty() && setting.name.find('.') == std::string::npos,
                 name, ": setting '", setting.name, "' is not a key under [algorithm]");
      ASGD_CHECK(std::find(own.begin(), own.end(), setting.name) == own.end(), name,
                 " declares the setting ", setting.name, " twice");
      own.push_back(setting.name);
      ASGD_CHECK(!std::binary_search(central.begin(), central.end(), "algorithm." + setting.name),
                 name, ": algorithm.", setting.name, " is a central key, not a setting");
      auto [it, first] = seen.emplace(setting.name, &setting);
      ASGD_CHECK(first || SameDeclaration(*it->second, setting), "the setting ", setting.name,
                 " is declared differently by ", name, " and another strategy");
    }
  }
}

const std::map<std::string, Strategy>& Registry() {
  static const auto* registry = [] {
    auto* m = new std::map<std::string, Strategy>();
#define ASGD_STRATEGY_ENTRY(Name, file) Name##Strategy(),
    for (Strategy s : {ASGD_BUILTIN_STRATEGIES(ASGD_STRATEGY_ENTRY)}) {
#undef ASGD_STRATEGY_ENTRY
      // A strategy reads its settings' keys.
      for (const Setting& setting : s.settings) s.keys.push_back("algorithm." + setting.name);
      std::sort(s.keys.begin(), s.keys.end());
      s.keys.erase(std::unique(s.keys.begin(), s.keys.end()), s.keys.end());
      const std::string name = s.name;
      ASGD_CHECK(m->emplace(name, std::move(s)).second, "two strategies are named ", name);
    }
    CheckSettings(*m);
    // dist-keras calls AGN "ADAG" (docs/algorithms.md#notation); the alias keeps its configs
    // working.
    (*m)["adag"] = (*m)["agn"];
    return m;
  }();
  return *registry;
}

}  // namespace

const char* FamilyName(Family family) {
  switch (family) {
    case Family::kSequential:
      return "sequential";
    case Family::kStore:
      return "store";
    case Family::kGroup:
      return "group";
  }
  return "?";
}

uint64_t WorkerRuleSeed(uint64_t run_seed, int worker) {
  return DeriveSeed(run_seed, "worker_rule", static_cast<uint64_t>(worker));
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

const Strategy* TryFindStrategy(const std::string& name) {
  const auto& r = Registry();
  auto it = r.find(name);
  return it == r.end() ? nullptr : &it->second;
}

const Setting* FindSetting(std::string_view name) {
  for (const Strategy* s : Strategies()) {
    for (const Setting& setting : s->settings) {
      if (setting.name == name) return &setting;
    }
  }
  return nullptr;
}

std::vector<const Setting*> AllSettings() {
  std::vector<const Setting*> all;
  for (const Strategy* s : Strategies()) {
    for (const Setting& setting : s->settings) {
      if (FindSetting(setting.name) == &setting) all.push_back(&setting);
    }
  }
  return all;
}

std::vector<std::string> StrategiesWithSetting(std::string_view name) {
  std::vector<std::string> names;
  for (const Strategy* s : Strategies()) {
    for (const Setting& setting : s->settings) {
      if (setting.name == name) names.push_back(s->name);
    }
  }
  return names;
}

std::vector<std::string> StrategyNames() {
  std::vector<std::string> names;
  for (const auto& [name, s] : Registry()) names.push_back(name);
  return names;
}

}  // namespace asgd::algorithms
