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

Status ParamClient::Pull(std::span<float> out) {
  Status st = DoPull(out);
  if (st.ok()) traffic_.bytes_pulled += static_cast<int64_t>(out.size_bytes());
  return st;
}

Status ParamClient::Push(std::span<const float> update, int64_t step) {
  Status st = DoPush(update, step);
  if (st.ok()) traffic_.bytes_pushed += static_cast<int64_t>(update.size_bytes());
  return st;
}

Status ParamClient::PushPull(std::span<const float> update, std::span<float> out, int64_t step) {
  Status st = DoPushPull(update, out, step);
  if (st.ok()) {
    traffic_.bytes_pushed += static_cast<int64_t>(update.size_bytes());
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
    traffic_.bytes_pushed += static_cast<int64_t>(indices.size() * (sizeof(int64_t) + sizeof(float)));
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
