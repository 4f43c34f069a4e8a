// The grid of `asgd sweep` and `asgd tune`: --grid axes, their cartesian product and the
// labels of its points.
#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/strings.h"
#include "experiments/batch/batch_internal.h"
#include "experiments/config/config_keys.h"

namespace asgd::experiments::batch {

std::vector<GridAxis> ParseGrid(const std::vector<std::string>& specs, const std::string& command) {
  std::vector<GridAxis> axes;
  const Schema& schema = ExperimentSchema();
  const std::string prefix = "asgd " + command + ": ";
  for (const auto& spec : specs) {
    const std::size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw InputError(prefix + "--grid " + QuoteForMessage(spec) +
                       ": expected section.key=v1,v2[,...] or section.key=log:LO:HI:N, e.g. "
                       "--grid algorithm.learning_rate=0.01,0.1");
    }
    GridAxis axis;
    axis.key = std::string(Trim(std::string_view(spec).substr(0, eq)));
    const KeySpec& key = schema.Get(axis.key);  // an unknown key, with a suggestion
    if (IsBatchKey(axis.key) || axis.key == "experiment.seed") {
      throw InputError(prefix + "--grid " + axis.key + ": set by asgd " + command +
                       " for every run" +
                       (axis.key == "experiment.seed" ? " (use --seeds N)" : ""));
    }
    for (const auto& a : axes) {
      if (a.key == axis.key) throw InputError(prefix + "--grid " + axis.key + " is given twice");
    }
    try {
      const AxisValues values = ExpandGridSpec(axis.key, std::string(Trim(spec.substr(eq + 1))));
      axis.values = values.values;
      axis.spacing = values.spacing;
      axis.step = values.step;
    } catch (const InputError& e) {
      throw InputError(prefix + e.what());
    }
    axis.integer = key.type == KeyType::kInt;
    axes.push_back(std::move(axis));
  }
  // Labels use the key without its section unless two axes share it.
  for (auto& a : axes) {
    const std::string k = a.key.substr(a.key.find('.') + 1);
    const bool shared = std::count_if(axes.begin(), axes.end(), [&](const GridAxis& b) {
                          return b.key.substr(b.key.find('.') + 1) == k;
                        }) > 1;
    a.short_key = shared ? a.key : k;
  }
  return axes;
}

std::vector<std::vector<std::size_t>> GridPoints(const std::vector<GridAxis>& axes) {
  std::vector<std::vector<std::size_t>> points = {{}};
  for (const auto& a : axes) {
    std::vector<std::vector<std::size_t>> next;
    for (const auto& p : points) {
      for (std::size_t v = 0; v < a.values.size(); ++v) {
        auto q = p;
        q.push_back(v);
        next.push_back(std::move(q));
      }
    }
    points = std::move(next);
  }
  return points;
}

std::string ValuesLabel(const std::vector<GridAxis>& axes, const std::vector<std::string>& values,
                        const std::string& fallback) {
  if (axes.empty()) return fallback;
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < axes.size(); ++i)
    parts.push_back(axes[i].short_key + "=" + values[i]);
  return Join(parts, " ");
}

std::vector<std::string> PointValues(const std::vector<GridAxis>& axes,
                                     const std::vector<std::size_t>& point) {
  std::vector<std::string> values;
  for (std::size_t i = 0; i < axes.size(); ++i) values.push_back(axes[i].values[point[i]]);
  return values;
}

}  // namespace asgd::experiments::batch
