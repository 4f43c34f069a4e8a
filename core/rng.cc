#include "core/rng.h"

#include <cmath>

#include "core/check.h"

namespace asgd {
namespace {

inline uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

__extension__ typedef unsigned __int128 Uint128;

}  // namespace

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) {
    x += 0x9e3779b97f4a7c15ULL;
    s = SplitMix64(x);
  }
}

uint64_t Rng::NextU64() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double Rng::Uniform() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

uint64_t Rng::UniformInt(uint64_t n) {
  ASGD_CHECK_GT(n, 0u);
  Uint128 m = static_cast<Uint128>(NextU64()) * n;
  auto low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<Uint128>(NextU64()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

double Rng::Normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u, v, s;
  do {
    u = 2.0 * Uniform() - 1.0;
    v = 2.0 * Uniform() - 1.0;
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  const double f = std::sqrt(-2.0 * std::log(s) / s);
  spare_ = v * f;
  has_spare_ = true;
  return u * f;
}

double Rng::TruncatedNormal(double stddev) {
  for (;;) {
    double z = Normal();
    if (z >= -2.0 && z <= 2.0) return z * stddev;
  }
}

uint64_t DeriveSeed(uint64_t base, std::string_view purpose, uint64_t index) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : purpose) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return SplitMix64(SplitMix64(base ^ h) + index);
}

}  // namespace asgd
