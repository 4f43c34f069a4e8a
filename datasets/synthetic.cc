#include "datasets/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "datasets/memory.h"

namespace asgd::datasets {
namespace {

// Guards against sizes whose product overflows or that no machine could hold.
constexpr int64_t kMaxValues = int64_t{1} << 36;

std::string Str(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

Dataset Generate(const SyntheticOptions& o, const std::vector<double>& centres, int64_t n,
                 std::string_view stream, std::string name) {
  const int64_t d = o.num_features;
  const int64_t k = o.nonzeros_per_example;
  Dataset ds;
  ds.name = std::move(name);
  ds.num_examples = n;
  ds.num_features = d;
  ds.num_classes = o.num_classes;
  ds.example_shape = {d};
  ds.sparse = k > 0;
  ds.labels.resize(static_cast<std::size_t>(n));
  Rng rng(DeriveSeed(o.seed, stream));

  if (!ds.sparse) {
    ds.dense.reserve(static_cast<std::size_t>(n * d));
    AdviseHugePages(ds.dense.data(), static_cast<std::size_t>(n * d) * sizeof(float));
    ds.dense.resize(static_cast<std::size_t>(n * d));
    for (int64_t i = 0; i < n; ++i) {
      const auto y = static_cast<int32_t>(rng.UniformInt(static_cast<uint64_t>(o.num_classes)));
      ds.labels[static_cast<std::size_t>(i)] = y;
      const double* c = centres.data() + y * d;
      float* row = ds.dense.data() + i * d;
      for (int64_t j = 0; j < d; ++j) row[j] = static_cast<float>(c[j] + o.noise * rng.Normal());
    }
    return ds;
  }

  ds.indptr.resize(static_cast<std::size_t>(n + 1));
  ds.indices.resize(static_cast<std::size_t>(n * k));
  ds.values.resize(static_cast<std::size_t>(n * k));
  // Floyd's algorithm draws k distinct coordinates with k random numbers; the marks
  // are cleared after each example, so the cost per example is O(k log k), not O(d).
  std::vector<uint8_t> taken(static_cast<std::size_t>(d), 0);
  std::vector<int32_t> chosen;
  chosen.reserve(static_cast<std::size_t>(k));
  for (int64_t i = 0; i < n; ++i) {
    const auto y = static_cast<int32_t>(rng.UniformInt(static_cast<uint64_t>(o.num_classes)));
    ds.labels[static_cast<std::size_t>(i)] = y;
    chosen.clear();
    for (int64_t j = d - k; j < d; ++j) {
      auto t = static_cast<int64_t>(rng.UniformInt(static_cast<uint64_t>(j + 1)));
      int64_t pick = taken[static_cast<std::size_t>(t)] ? j : t;
      taken[static_cast<std::size_t>(pick)] = 1;
      chosen.push_back(static_cast<int32_t>(pick));
    }
    std::sort(chosen.begin(), chosen.end());
    const double* c = centres.data() + y * d;
    const int64_t base = i * k;
    ds.indptr[static_cast<std::size_t>(i)] = base;
    for (int64_t q = 0; q < k; ++q) {
      const int32_t j = chosen[static_cast<std::size_t>(q)];
      taken[static_cast<std::size_t>(j)] = 0;
      ds.indices[static_cast<std::size_t>(base + q)] = j;
      ds.values[static_cast<std::size_t>(base + q)] =
          static_cast<float>(c[j] + o.noise * rng.Normal());
    }
  }
  ds.indptr[static_cast<std::size_t>(n)] = n * k;
  return ds;
}

}  // namespace

void ValidateSyntheticOptions(const SyntheticOptions& o) {
  if (o.num_features < 1 || o.num_features > std::numeric_limits<int32_t>::max()) {
    throw ConfigError("data.synthetic_features", std::to_string(o.num_features),
                      "a feature count from 1 to 2147483647");
  }
  const int64_t per_example = o.nonzeros_per_example > 0 ? o.nonzeros_per_example : o.num_features;
  if (o.num_train < 1 || o.num_train > kMaxValues / per_example) {
    throw ConfigError("data.synthetic_train", std::to_string(o.num_train),
                      "a positive example count (at most " +
                          std::to_string(kMaxValues / per_example) + " at this width)");
  }
  if (o.num_test < 1 || o.num_test > kMaxValues / per_example) {
    throw ConfigError("data.synthetic_test", std::to_string(o.num_test),
                      "a positive example count (at most " +
                          std::to_string(kMaxValues / per_example) + " at this width)");
  }
  if (o.num_classes < 2 || o.num_classes > 1000000 || o.num_classes > kMaxValues / o.num_features) {
    throw ConfigError("data.synthetic_classes", std::to_string(o.num_classes),
                      "at least 2 classes (and num_classes x num_features centre "
                      "coordinates that fit in memory)");
  }
  if (!std::isfinite(o.separation) || o.separation < 0) {
    throw ConfigError("data.synthetic_separation", Str(o.separation), "a finite number >= 0");
  }
  if (!std::isfinite(o.noise) || o.noise < 0) {
    throw ConfigError("data.synthetic_noise", Str(o.noise), "a finite number >= 0");
  }
  if (o.nonzeros_per_example < 0 || o.nonzeros_per_example > o.num_features) {
    throw ConfigError("data.synthetic_nonzeros", std::to_string(o.nonzeros_per_example),
                      "0 (dense) or a count from 1 to data.synthetic_features = " +
                          std::to_string(o.num_features));
  }
}

TrainTest MakeSynthetic(const SyntheticOptions& o) {
  ValidateSyntheticOptions(o);
  const int64_t d = o.num_features;
  const int64_t seen = o.nonzeros_per_example > 0 ? o.nonzeros_per_example : d;
  const double scale = o.separation / std::sqrt(static_cast<double>(seen));
  std::vector<double> centres(static_cast<std::size_t>(o.num_classes * d));
  Rng rng(DeriveSeed(o.seed, "synthetic/centres"));
  for (double& c : centres) c = scale * rng.Normal();

  TrainTest out;
  out.train = Generate(o, centres, o.num_train, "synthetic/train", "synthetic/train");
  out.test = Generate(o, centres, o.num_test, "synthetic/test", "synthetic/test");
  return out;
}

}  // namespace asgd::datasets
