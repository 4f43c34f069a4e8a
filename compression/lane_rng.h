// The stochastic quantizers' random stream (qsgd, terngrad): 16 independent xoshiro128**
// generators (Blackman & Vigna 2018, "Scrambled Linear Pseudorandom Number Generators")
// advanced together, so that a compiler vectorises one step of all lanes into a few SIMD
// instructions. Element i of a vector takes the (i / 16)-th output of lane i % 16.
//
// Definition (the same in every build, with or without -march=native): from the 64-bit
// seed, w_k = SplitMix64(seed + k * 0x9e3779b97f4a7c15) for k = 0..31 (core/rng.h); lane l
// starts at s0 = low 32 bits of w_{2l}, s1 = high 32 bits of w_{2l}, s2, s3 = the low and
// high 32 bits of w_{2l+1} (a lane that would start all zero starts at s0 = 1). Each step
// outputs rotl(s1 * 5, 7) * 9 and advances the lane as xoshiro128** does.
//
// Thread safety: a LaneRng is a plain value used by one thread.
#pragma once

#include <bit>
#include <cstdint>

#include "core/rng.h"

namespace asgd::compression {

class LaneRng {
 public:
  static constexpr int kLanes = 16;

  explicit LaneRng(uint64_t seed) {
    for (int l = 0; l < kLanes; ++l) {
      const uint64_t a = SplitMix64(seed + static_cast<uint64_t>(2 * l) * kGamma);
      const uint64_t b = SplitMix64(seed + static_cast<uint64_t>(2 * l + 1) * kGamma);
      s0_[l] = static_cast<uint32_t>(a);
      s1_[l] = static_cast<uint32_t>(a >> 32);
      s2_[l] = static_cast<uint32_t>(b);
      s3_[l] = static_cast<uint32_t>(b >> 32);
      if ((s0_[l] | s1_[l] | s2_[l] | s3_[l]) == 0) s0_[l] = 1;
    }
  }

  // One step of every lane: out[l] is lane l's next output.
  void Next(uint32_t* out) {
    for (int l = 0; l < kLanes; ++l) {
      uint32_t s0 = s0_[l], s1 = s1_[l], s2 = s2_[l], s3 = s3_[l];
      out[l] = std::rotl(s1 * 5u, 7) * 9u;
      const uint32_t t = s1 << 9;
      s2 ^= s0;
      s3 ^= s1;
      s1 ^= s2;
      s0 ^= s3;
      s2 ^= t;
      s3 = std::rotl(s3, 11);
      s0_[l] = s0;
      s1_[l] = s1;
      s2_[l] = s2;
      s3_[l] = s3;
    }
  }

  // steps * kLanes outputs: out[t * kLanes + l] is lane l's output at step t, i.e. the
  // draws of the next steps * kLanes elements in order.
  void Fill(uint32_t* out, int steps) {
    for (int t = 0; t < steps; ++t) Next(out + t * kLanes);
  }

 private:
  static constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
  alignas(64) uint32_t s0_[kLanes];
  alignas(64) uint32_t s1_[kLanes];
  alignas(64) uint32_t s2_[kLanes];
  alignas(64) uint32_t s3_[kLanes];
};

}  // namespace asgd::compression
