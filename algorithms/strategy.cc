#include "algorithms/strategy.h"

#include <algorithm>
#include <map>

#include "algorithms/builtin_strategies.h"
#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace asgd::algorithms {
namespace {

const std::map<std::string, Strategy>& Registry() {
  static const auto* registry = [] {
    auto* m = new std::map<std::string, Strategy>();
    for (Strategy s :
         {AsyncSgdStrategy(), HogwildStrategy(), DownpourStrategy(), AgnStrategy(),
          DynSgdStrategy(), AdagDistanceStrategy(), SyncSgdStrategy(), SagnStrategy(),
          EasgdStrategy(), AeasgdStrategy(), AeamsgdStrategy(), StalenessAwareStrategy(),
          SspStrategy(), ModelAveragingStrategy(), DcAsgdStrategy()}) {
      (*m)[s.name] = s;
    }
    // dist-keras calls AGN "ADAG" (algorithms.md §0); the alias keeps its configs working.
    (*m)["adag"] = (*m)["agn"];
    return m;
  }();
  return *registry;
}

}  // namespace

Status ParamClient::PullSparse(std::span<const int64_t> indices, std::span<float> out) {
  (void)indices;  // a dense pull reads every coordinate, the listed ones included
  return Pull(out);
}

Status ParamClient::PushSparse(std::span<const int64_t> indices, std::span<const float> values,
                               int64_t step) {
  ASGD_CHECK_EQ(indices.size(), values.size(), "sparse push");
  std::vector<float> dense(static_cast<std::size_t>(size()), 0.0f);
  for (std::size_t i = 0; i < indices.size(); ++i) {
    ASGD_CHECK(indices[i] >= 0 && indices[i] < size(), "sparse index ", indices[i], " outside [0, ",
               size(), ")");
    dense[static_cast<std::size_t>(indices[i])] += values[i];
  }
  return Push(dense, step);
}

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
