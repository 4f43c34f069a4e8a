// Deterministic random numbers.
//
// Every random choice in asgd (initialisation, shuffling, partitioning, synthetic data,
// scheduling in tests) draws from an Rng seeded from the run's config, so a run is
// reproducible from its recorded seed. The generator (xoshiro256**) and the
// distributions are implemented here rather than taken from <random>, whose
// distributions differ between standard libraries.
//
// Independent streams: DeriveSeed(seed, "init") and DeriveSeed(seed, "shuffle", worker)
// give unrelated seeds for different purposes from one run seed.
//
// Thread safety: an Rng is not thread-safe; give each thread its own.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>

namespace asgd {

class Rng {
 public:
  explicit Rng(uint64_t seed);

  uint64_t NextU64();
  // Uniform in [0, 1) with 53 random bits.
  double Uniform();
  // Uniform in [lo, hi).
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [0, n). REQUIRES: n > 0. Unbiased (Lemire's method).
  uint64_t UniformInt(uint64_t n);
  // Standard normal (Marsaglia polar method).
  double Normal();
  // Normal truncated to [-2 stddev, 2 stddev], as TensorFlow's truncated_normal.
  double TruncatedNormal(double stddev);

  // Fisher-Yates shuffle with this generator.
  template <typename T>
  void Shuffle(std::span<T> items) {
    for (std::size_t i = items.size(); i > 1; --i) {
      std::size_t j = static_cast<std::size_t>(UniformInt(i));
      std::swap(items[i - 1], items[j]);
    }
  }

 private:
  uint64_t s_[4];
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// SplitMix64 step; also a good 64-bit mixer.
uint64_t SplitMix64(uint64_t x);

// A seed for one purpose (and optional index, e.g. a worker id) derived from a base seed.
uint64_t DeriveSeed(uint64_t base, std::string_view purpose, uint64_t index = 0);

}  // namespace asgd
