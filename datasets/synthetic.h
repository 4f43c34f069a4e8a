// Synthetic classification data: Gaussian clusters, one per class, generated from a seed.
//
// Model: class centres c_k have i.i.d. N(0, separation² / m) coordinates, where m is the
// number of coordinates one example has (num_features when dense, nonzeros_per_example
// when sparse). An example draws its class uniformly, then
//   dense:  x = c_y + noise · N(0, I)
//   sparse: x_j = c_y[j] + noise · N(0, 1) on nonzeros_per_example distinct coordinates
//           j drawn uniformly (sorted), and 0 elsewhere.
// So over the coordinates an example sees, a centre has squared norm ≈ separation², two
// centres are ≈ separation · √2 apart and the noise has stddev `noise` in every
// direction: separation / noise sets how separable the classes are (for two dense
// classes the Bayes error is about Φ(−separation / (√2 · noise))).
//
// Determinism: the same options give the same bytes on every platform. The centres, the
// train split and the test split use independent streams derived from `seed`
// (DeriveSeed(seed, "synthetic/centres" | "synthetic/train" | "synthetic/test")), so
// changing num_train leaves the test split unchanged.
#pragma once

#include <cstdint>

#include "datasets/dataset.h"

namespace asgd::datasets {

struct SyntheticOptions {
  // Examples in the train split. Default: 10000.
  int64_t num_train = 10000;
  // Examples in the test split. Default: 2000.
  int64_t num_test = 2000;
  // Feature dimension. Default: 32. At most 2^31 − 1.
  int64_t num_features = 32;
  // Number of classes (clusters). Default: 2.
  int num_classes = 2;
  // Scale of the class centres (see above), in the same units as noise. Default: 3.
  double separation = 3.0;
  // Standard deviation of the per-coordinate Gaussian noise. Default: 1.
  double noise = 1.0;
  // 0: dense examples. k > 0: sparse (CSR) examples with exactly k non-zero coordinates
  // each, at most num_features. Default: 0.
  int64_t nonzeros_per_example = 0;
  // Base seed of all draws. Default: 1.
  uint64_t seed = 1;
};

// Throws ConfigError naming the config key of the bad field (num_train is
// "data.synthetic_train", nonzeros_per_example "data.synthetic_nonzeros", every other
// field "data.synthetic_<field without num_>") if the options are invalid.
void ValidateSyntheticOptions(const SyntheticOptions& options);

// Generates both splits, named "synthetic/train" and "synthetic/test". Throws ConfigError
// if the options are invalid.
TrainTest MakeSynthetic(const SyntheticOptions& options);

}  // namespace asgd::datasets
