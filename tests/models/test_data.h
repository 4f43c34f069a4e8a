// Batches and gradient-check helpers for the models tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/param_layout.h"
#include "core/rng.h"
#include "datasets/dataset.h"
#include "models/architecture.h"

namespace asgd::models::testing {

// Dense examples (row-major) with labels; View() makes BatchViews by hand.
struct DenseData {
  int64_t features = 0;
  std::vector<float> x;
  std::vector<int32_t> labels;

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  datasets::BatchView View(int64_t begin, int64_t count) const {
    datasets::BatchView b;
    b.size = count;
    b.num_features = features;
    b.x = x.data() + begin * features;
    b.labels = labels.data() + begin;
    return b;
  }
  datasets::BatchView All() const { return View(0, size()); }
};

// Sparse CSR examples. indptr is absolute, as in a view into a whole dataset.
struct SparseData {
  int64_t features = 0;
  std::vector<int64_t> indptr = {0};
  std::vector<int32_t> indices;
  std::vector<float> values;
  std::vector<int32_t> labels;

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  datasets::BatchView View(int64_t begin, int64_t count) const {
    datasets::BatchView b;
    b.size = count;
    b.num_features = features;
    b.indptr = indptr.data() + begin;
    b.indices = indices.data();
    b.values = values.data();
    b.labels = labels.data() + begin;
    return b;
  }
  datasets::BatchView All() const { return View(0, size()); }
};

// Gaussian clusters, one per class, with centres `separation` apart per coordinate on
// average: linearly separable for large separation.
inline DenseData MakeBlobs(int64_t n, int64_t features, int classes, uint64_t seed,
                           double separation = 3.0, double noise = 1.0) {
  Rng rng(seed);
  std::vector<double> centres(static_cast<std::size_t>(classes * features));
  for (double& c : centres) c = separation * rng.Normal();
  DenseData d;
  d.features = features;
  for (int64_t i = 0; i < n; ++i) {
    const auto label = static_cast<int32_t>(rng.UniformInt(static_cast<uint64_t>(classes)));
    d.labels.push_back(label);
    for (int64_t f = 0; f < features; ++f) {
      d.x.push_back(static_cast<float>(centres[static_cast<std::size_t>(label * features + f)] +
                                       noise * rng.Normal()));
    }
  }
  return d;
}

// Images of `channels` × h × w in [0, 1]: class c has a bright square in quadrant c (of
// 4), plus uniform noise.
inline DenseData MakeImages(int64_t n, int64_t channels, int64_t h, int64_t w, int classes,
                            uint64_t seed) {
  Rng rng(seed);
  DenseData d;
  d.features = channels * h * w;
  for (int64_t i = 0; i < n; ++i) {
    const auto label = static_cast<int32_t>(rng.UniformInt(static_cast<uint64_t>(classes)));
    d.labels.push_back(label);
    const int64_t qi = (label / 2) % 2, qj = label % 2;
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t y = 0; y < h; ++y) {
        for (int64_t x = 0; x < w; ++x) {
          const bool bright = (y * 2 / h) == qi && (x * 2 / w) == qj;
          d.x.push_back(static_cast<float>((bright ? 0.6 : 0.0) + 0.4 * rng.Uniform()));
        }
      }
    }
  }
  return d;
}

// a9a-like data: `nnz` distinct features of `features` per row, values 1 (or random in
// [0.5, 1.5) when random_values), label 1 iff a hidden linear score is positive.
inline SparseData MakeSparse(int64_t n, int64_t features, int64_t nnz, uint64_t seed,
                             bool random_values = false) {
  Rng rng(seed);
  std::vector<double> w(static_cast<std::size_t>(features));
  for (double& v : w) v = rng.Normal();
  SparseData d;
  d.features = features;
  std::vector<int32_t> all(static_cast<std::size_t>(features));
  for (int64_t i = 0; i < features; ++i) all[static_cast<std::size_t>(i)] = static_cast<int32_t>(i);
  for (int64_t i = 0; i < n; ++i) {
    rng.Shuffle(std::span<int32_t>(all));
    std::vector<int32_t> row(all.begin(), all.begin() + nnz);
    std::sort(row.begin(), row.end());
    double score = 0.0;
    for (int32_t j : row) {
      const float v = random_values ? static_cast<float>(rng.Uniform(0.5, 1.5)) : 1.0f;
      d.indices.push_back(j);
      d.values.push_back(v);
      score += w[static_cast<std::size_t>(j)] * v;
    }
    d.indptr.push_back(static_cast<int64_t>(d.indices.size()));
    d.labels.push_back(score > 0 ? 1 : 0);
  }
  return d;
}

// Central differences of f at x in double: (f(x + eps e_i) − f(x − eps e_i)) / 2eps for
// the coordinates listed (all when empty).
inline std::vector<double> NumericalGradient(const std::function<double(std::span<const double>)>& f,
                                             std::vector<double> x, double eps,
                                             const std::vector<int64_t>& coords = {}) {
  std::vector<double> g(x.size(), 0.0);
  auto one = [&](std::size_t i) {
    const double saved = x[i];
    x[i] = saved + eps;
    const double up = f(x);
    x[i] = saved - eps;
    const double down = f(x);
    x[i] = saved;
    g[i] = (up - down) / (2 * eps);
  };
  if (coords.empty()) {
    for (std::size_t i = 0; i < x.size(); ++i) one(i);
  } else {
    for (int64_t i : coords) one(static_cast<std::size_t>(i));
  }
  return g;
}

// ‖a − b‖ / max(‖a‖, ‖b‖, tiny) over the given coordinates (all when empty).
inline double RelativeError(std::span<const double> a, std::span<const double> b,
                            const std::vector<int64_t>& coords = {}) {
  double diff = 0, na = 0, nb = 0;
  auto add = [&](std::size_t i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    na += a[i] * a[i];
    nb += b[i] * b[i];
  };
  if (coords.empty()) {
    for (std::size_t i = 0; i < a.size(); ++i) add(i);
  } else {
    for (int64_t i : coords) add(static_cast<std::size_t>(i));
  }
  return std::sqrt(diff) / std::max({std::sqrt(na), std::sqrt(nb), 1e-30});
}

inline std::vector<double> RandomVector(std::size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<double> v(n);
  for (double& x : v) x = scale * rng.Normal();
  return v;
}

// A model's initial parameters for a seed.
template <typename ModelT>
std::vector<float> InitParams(const ModelT& model, uint64_t seed) {
  std::vector<float> p(static_cast<std::size_t>(model.layout().size()));
  model.Initialize(p, seed);
  return p;
}

// Initial values plus noise, so that biases are not zero and every path carries signal.
template <typename ModelT>
std::vector<float> PerturbedParams(const ModelT& model, uint64_t seed) {
  std::vector<float> p = InitParams(model, seed);
  Rng rng(seed + 1000);
  for (float& x : p) x += static_cast<float>(0.05 * rng.Normal());
  return p;
}

inline MlpArchitecture Mlp(int64_t in, std::vector<int64_t> hidden, Activation a, int classes) {
  MlpArchitecture arch;
  arch.inputs = in;
  arch.hidden = std::move(hidden);
  arch.activation = a;
  arch.classes = classes;
  return arch;
}

// A small CNN with odd image sizes (pooling drops a row and a column) and 2 input
// channels: 2×11×13 → conv1 3×3 same → 11×13 → pool 5×6 → conv2 valid → 3×4 → pool 1×2.
inline CnnArchitecture SmallCnn(Activation a) {
  CnnArchitecture arch;
  arch.in_channels = 2;
  arch.height = 11;
  arch.width = 13;
  arch.channels = {3, 4};
  arch.fc = {5};
  arch.kernel = 3;
  arch.activation = a;
  arch.classes = 3;
  return arch;
}

}  // namespace asgd::models::testing
