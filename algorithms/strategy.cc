#include "algorithms/strategy.h"

#include <algorithm>
#include <map>

#include "algorithms/builtin_strategies.h"
#include "core/error.h"
#include "core/strings.h"

namespace asgd::algorithms {
namespace {

const std::map<std::string, Strategy>& Registry() {
  static const auto* registry = [] {
    auto* m = new std::map<std::string, Strategy>();
    for (Strategy s : {AsyncSgdStrategy(), HogwildStrategy(), DownpourStrategy(), AgnStrategy(),
                       DynSgdStrategy()}) {
      (*m)[s.name] = s;
    }
    // dist-keras calls AGN "ADAG" (algorithms.md §0); the alias keeps its configs working.
    (*m)["adag"] = (*m)["agn"];
    return m;
  }();
  return *registry;
}

}  // namespace

const Strategy& FindStrategy(const std::string& name) {
  const auto& r = Registry();
  auto it = r.find(name);
  if (it == r.end()) {
    throw ConfigError("algorithm.name", name, "one of sgd, " + Join(StrategyNames(), ", "));
  }
  return it->second;
}

std::vector<std::string> StrategyNames() {
  std::vector<std::string> names;
  for (const auto& [name, s] : Registry()) names.push_back(name);
  return names;
}

}  // namespace asgd::algorithms
