#include "experiments/analysis/seed_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <boost/math/distributions/students_t.hpp>

#include "core/check.h"
#include "core/strings.h"
#include "experiments/config/config_keys.h"

namespace asgd::experiments {

double StudentT975(int64_t df) {
  ASGD_CHECK(df >= 1, "StudentT975 needs df >= 1, got ", df);
  // Boost.Math inverts the t distribution function to full double precision for any df.
  const boost::math::students_t dist(static_cast<double>(df));
  return boost::math::quantile(dist, 0.975);
}

bool MeanInterval::HasInterval() const { return n >= 2; }

MeanInterval Interval95(const std::vector<double>& values) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  MeanInterval m;
  double sum = 0;
  for (double v : values) {
    if (std::isnan(v)) continue;
    ++m.n;
    sum += v;
  }
  if (m.n == 0) {
    m.mean = m.std = m.half_width = nan;
    return m;
  }
  m.mean = sum / static_cast<double>(m.n);
  if (m.n < 2) {
    m.std = m.half_width = nan;
    return m;
  }
  double ss = 0;
  for (double v : values) {
    if (!std::isnan(v)) ss += (v - m.mean) * (v - m.mean);
  }
  m.std = std::sqrt(ss / static_cast<double>(m.n - 1));
  m.half_width = StudentT975(m.n - 1) * m.std / std::sqrt(static_cast<double>(m.n));
  return m;
}

bool NotSeparated(const MeanInterval& a, const MeanInterval& b) {
  if (!a.HasInterval() || !b.HasInterval()) return false;
  return a.Low() <= b.High() && b.Low() <= a.High();
}

bool IsSeedNeutralKey(const std::string& key) { return KeyIn(kSeedNeutralKeys, key); }

std::vector<std::size_t> SeedGroups(
    const std::vector<std::map<std::string, std::string>>& configs) {
  std::vector<std::map<std::string, std::string>> keys;  // one per group
  std::vector<std::size_t> group(configs.size());
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (configs[i].empty()) {
      group[i] = keys.size();
      keys.push_back({{"", std::to_string(i)}});  // unlike any config
      continue;
    }
    std::map<std::string, std::string> key;
    for (const auto& [k, v] : configs[i]) {
      if (k == "experiment.seed" || IsSeedNeutralKey(k)) continue;
      key[k] = k == "model.device" && StartsWith(v, "cuda:") ? std::string("cuda") : v;
    }
    const auto it = std::find(keys.begin(), keys.end(), key);
    group[i] = static_cast<std::size_t>(it - keys.begin());
    if (it == keys.end()) keys.push_back(std::move(key));
  }
  return group;
}

SeedGrouping GroupSeeds(const std::vector<std::string>& labels,
                        const std::vector<std::map<std::string, std::string>>& configs) {
  ASGD_CHECK(labels.size() == configs.size());
  SeedGrouping g;
  g.group = SeedGroups(configs);
  for (std::size_t i = 0; i < g.group.size(); ++i) {
    if (g.group[i] >= g.members.size()) g.members.resize(g.group[i] + 1);
    g.members[g.group[i]].push_back(i);
  }
  for (const auto& members : g.members) {
    std::vector<std::string> distinct;
    for (std::size_t i : members) {
      if (std::find(distinct.begin(), distinct.end(), labels[i]) == distinct.end()) {
        distinct.push_back(labels[i]);
      }
    }
    std::string label = Join(distinct, ", ");
    const std::string base = label;
    for (int k = 2; std::find(g.labels.begin(), g.labels.end(), label) != g.labels.end(); ++k) {
      label = base + " #" + std::to_string(k);
    }
    g.labels.push_back(label);
  }
  return g;
}

std::ptrdiff_t BestRow(const std::vector<MeanInterval>& rows, bool higher) {
  std::ptrdiff_t best = -1;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].n == 0) continue;
    if (best < 0) {
      best = static_cast<std::ptrdiff_t>(i);
      continue;
    }
    const double b = rows[static_cast<std::size_t>(best)].mean;
    if (higher ? rows[i].mean > b : rows[i].mean < b) best = static_cast<std::ptrdiff_t>(i);
  }
  return best;
}

}  // namespace asgd::experiments
