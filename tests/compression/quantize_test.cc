// The quantizers' block fast paths (quantize_blocks.h, bit_pack.h's PackBlock, lane_rng.h)
// against plain references written from the definitions in compressor.h, bit_pack.h and
// lane_rng.h: one element at a time, one xoshiro128** per lane, BitWriter / BitReader.
// Equal frames and equal floats, bit for bit, at every length around the block and word
// boundaries, every code width the block path takes and the wide ones after it.
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "compression/bit_pack.h"
#include "compression/compressor.h"
#include "compression/lane_rng.h"
#include "core/rng.h"

namespace asgd::compression {
namespace {

// xoshiro128** (Blackman & Vigna), the reference code's step.
struct Xoshiro128 {
  uint32_t s[4];
  uint32_t Next() {
    const uint32_t result = std::rotl(s[1] * 5u, 7) * 9u;
    const uint32_t t = s[1] << 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = std::rotl(s[3], 11);
    return result;
  }
};

// The 16 lanes as lane_rng.h's definition seeds them.
std::vector<Xoshiro128> Lanes(uint64_t seed) {
  std::vector<Xoshiro128> lanes(16);
  for (uint64_t l = 0; l < 16; ++l) {
    const uint64_t a = SplitMix64(seed + 2 * l * 0x9e3779b97f4a7c15ULL);
    const uint64_t b = SplitMix64(seed + (2 * l + 1) * 0x9e3779b97f4a7c15ULL);
    lanes[l].s[0] = static_cast<uint32_t>(a);
    lanes[l].s[1] = static_cast<uint32_t>(a >> 32);
    lanes[l].s[2] = static_cast<uint32_t>(b);
    lanes[l].s[3] = static_cast<uint32_t>(b >> 32);
  }
  return lanes;
}

// Element i's uniform: lane i % 16's next output, taken in element order.
float Uniform(std::vector<Xoshiro128>& lanes, std::size_t i) {
  return static_cast<float>(lanes[i % 16].Next() >> 8) / 16777216.0f;
}

std::vector<float> RandomVector(std::size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(rng.Normal());
  // Exact zeros, a negative zero and the largest magnitude twice, as gradients have them.
  if (n > 3) x[1] = 0.0f, x[2] = -0.0f;
  if (n > 5) x[4] = 5.0f, x[5] = -5.0f;
  return x;
}

std::unique_ptr<Compressor> Make(const std::string& name, int levels = 15) {
  CompressionOptions o;
  o.name = name;
  o.levels = levels;
  return NewCompressor(o);
}

std::vector<std::byte> Bytes(const std::vector<uint64_t>& words) {
  std::vector<std::byte> b(words.size() * 8);
  std::memcpy(b.data(), words.data(), b.size());
  return b;
}

// qsgd's frames by the definition, with the norm the encoder sent (its summation order is
// the encoder's business; the norm is checked against a double sum apart).
std::vector<std::byte> ReferenceQsgd(std::span<const float> x, uint32_t s, float norm,
                                     uint64_t seed) {
  auto lanes = Lanes(seed);
  const int bits = 1 + std::bit_width(s);
  std::vector<uint64_t> words(PackedWords(x.size(), bits));
  BitWriter w(words.data(), bits);
  const float per_norm = norm > 0 ? static_cast<float>(s) / norm : 0.0f;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float u = Uniform(lanes, i);
    const float r = std::min(static_cast<float>(s), std::fabs(x[i]) * per_norm);
    const float fl = std::floor(r);
    const auto level = static_cast<uint64_t>(fl) + (u < r - fl ? 1 : 0);
    w.Put(level << 1 | (level > 0 && x[i] < 0 ? 1 : 0));
  }
  w.Finish();
  return Bytes(words);
}

std::vector<std::byte> ReferenceTernGrad(std::span<const float> x, uint64_t seed) {
  auto lanes = Lanes(seed);
  float scale = 0;
  for (float v : x) scale = std::max(scale, std::fabs(v));
  std::vector<uint64_t> words(PackedWords(x.size(), 2));
  BitWriter w(words.data(), 2);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float u = Uniform(lanes, i);
    const bool keep = u < std::fabs(x[i]) * (scale > 0 ? 1.0f / scale : 0.0f);
    w.Put(!keep ? 0 : x[i] < 0 ? 2 : 1);
  }
  w.Finish();
  return Bytes(words);
}

// Lengths around the 64-element blocks and the 64-bit words, for every tail position.
std::vector<std::size_t> Lengths() {
  std::vector<std::size_t> n;
  for (std::size_t i = 1; i <= 130; ++i) n.push_back(i);
  for (std::size_t i : {191, 192, 193, 255, 256, 257, 1000, 4097}) n.push_back(i);
  return n;
}

TEST(LaneRng, IsSixteenXoshiro128StarStarLanes) {
  LaneRng gen(77);
  auto lanes = Lanes(77);
  uint32_t out[LaneRng::kLanes];
  for (int step = 0; step < 100; ++step) {
    gen.Next(out);
    for (int l = 0; l < LaneRng::kLanes; ++l)
      ASSERT_EQ(out[l], lanes[l].Next()) << step << " " << l;
  }
}

TEST(Quantize, QsgdEqualsTheReferenceAtEveryLengthAndWidth) {
  for (int levels : {1, 2, 3, 7, 15, 16, 127, 128, 255, 32768}) {
    auto c = Make("qsgd", levels);
    for (std::size_t n : Lengths()) {
      const std::vector<float> x = RandomVector(n, n);
      Rng rng(n * 31 + levels), seeds = rng;
      Encoded e;
      c->Encode(x, rng, &e);
      float norm;
      std::memcpy(&norm, e.frames[0].data(), 4);
      double sq = 0;
      for (float v : x) sq += double{v} * v;
      ASSERT_NEAR(norm, std::sqrt(sq), 1e-6 * std::sqrt(sq));
      ASSERT_EQ(e.frames[1], ReferenceQsgd(x, levels, norm, seeds.NextU64()))
          << "s = " << levels << ", n = " << n;
    }
  }
}

TEST(Quantize, TernGradEqualsTheReferenceAtEveryLength) {
  auto c = Make("terngrad");
  for (std::size_t n : Lengths()) {
    const std::vector<float> x = RandomVector(n, n + 1000);
    Rng rng(n), seeds = rng;
    Encoded e;
    c->Encode(x, rng, &e);
    ASSERT_EQ(e.frames[1], ReferenceTernGrad(x, seeds.NextU64())) << "n = " << n;
  }
}

// The reference decoder: compressor.h's value of element i, "" or refused.
bool ReferenceDecode(const Encoded& e, std::vector<float>* out) {
  float scale;
  std::memcpy(&scale, e.frames[0].data(), 4);
  const bool qsgd = e.encoding == Encoding::kQsgd;
  uint32_t s = 0;
  if (qsgd) std::memcpy(&s, e.frames[0].data() + 4, 4);
  const int bits = qsgd ? 1 + std::bit_width(s) : 2;
  BitReader r(e.frames[1].data(), bits);
  for (float& v : *out) {
    const uint64_t code = r.Get();
    if (qsgd) {
      const uint64_t level = code >> 1;
      if (level > s || (level == 0 && (code & 1))) return false;
      const float mag = scale / static_cast<float>(s) * static_cast<float>(level);
      v = (code & 1) ? -mag : mag;
    } else {
      if (code == 3) return false;
      v = code == 0 ? 0.0f : code == 1 ? scale : -scale;
    }
  }
  return r.RestIsZero();
}

// Decode of valid streams and of streams with one code or one padding bit spoiled, at every
// length and width: the fast decoder accepts exactly what the reference accepts and writes
// the same floats (or nothing).
TEST(Quantize, DecodeEqualsTheReference) {
  Rng pick(5);
  for (auto [name, levels] : {std::pair{"terngrad", 15},
                              {"qsgd", 1},
                              {"qsgd", 3},
                              {"qsgd", 4},
                              {"qsgd", 15},
                              {"qsgd", 63},
                              {"qsgd", 100},
                              {"qsgd", 127},
                              {"qsgd", 255}}) {
    auto c = Make(name, levels);
    for (std::size_t n : Lengths()) {
      const std::vector<float> x = RandomVector(n, n + 7);
      Rng rng(n);
      Encoded e;
      c->Encode(x, rng, &e);
      for (int spoil = 0; spoil < 4; ++spoil) {
        Encoded bad = e;
        if (spoil > 0) {  // flip one random bit of the code frame, padding included
          const std::size_t bit = pick.UniformInt(bad.frames[1].size() * 8);
          bad.frames[1][bit / 8] ^= std::byte{static_cast<unsigned char>(1u << (bit % 8))};
        }
        std::vector<float> want(n, 7.0f), got(n, 7.0f);
        const bool ok = ReferenceDecode(bad, &want);
        const std::string problem = Decode(bad, got);
        ASSERT_EQ(problem.empty(), ok)
            << name << " s = " << levels << " n = " << n << ": " << problem;
        if (ok) {
          ASSERT_EQ(std::memcmp(got.data(), want.data(), n * 4), 0) << name << " n = " << n;
        } else {
          ASSERT_EQ(got, std::vector<float>(n, 7.0f)) << name << " wrote before refusing";
        }
      }
    }
  }
}

// The encodings of a few fixed inputs, pinned: a build with or without -march=native (and
// with or without BMI2 or AVX-512) must send the same bytes for the same seed, and a change
// of the generator or the layout shows here. FNV-1a over the frames.
uint64_t Digest(const Encoded& e) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const auto& f : e.frames) {
    for (std::byte b : f) h = (h ^ static_cast<uint64_t>(b)) * 0x100000001b3ULL;
  }
  return h;
}

TEST(Quantize, EncodingsArePinned) {
  const std::vector<float> x = RandomVector(1000, 123);
  const std::pair<const char*, int> cases[] = {
      {"qsgd", 1}, {"qsgd", 15}, {"qsgd", 255}, {"terngrad", 15}};
  const uint64_t pinned[] = {0xdaf2a6f170f85965ULL, 0x472974fc2648d973ULL, 0x967af07002415c3cULL,
                             0xafa3b41cd50571afULL};
  for (std::size_t k = 0; k < 4; ++k) {
    Rng rng(2026);
    Encoded e;
    Make(cases[k].first, cases[k].second)->Encode(x, rng, &e);
    EXPECT_EQ(Digest(e), pinned[k]) << cases[k].first << " s = " << cases[k].second;
  }
}

}  // namespace
}  // namespace asgd::compression
