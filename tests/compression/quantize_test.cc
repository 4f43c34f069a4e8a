// The quantizers' block fast paths (quantize_blocks.h, bit_pack.h's PackBlock, lane_rng.h)
// against plain references written from the definitions in compressor.h, bit_pack.h and
// lane_rng.h: one element at a time, one xoshiro128** per lane, BitWriter / BitReader.
// Equal frames and equal floats, bit for bit, at every length around the block and word
// boundaries, every code width the block path takes and the wide ones after it.
#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
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

std::unique_ptr<Compressor> Make(const std::string& name, int levels = 15, int64_t bucket = 512,
                                 double clip = 2.5) {
  CompressionOptions o;
  o.name = name;
  o.levels = levels;
  o.bucket = bucket;
  o.clip = clip;
  return NewCompressor(o);
}

std::vector<std::byte> Bytes(const std::vector<uint64_t>& words) {
  std::vector<std::byte> b(words.size() * 8);
  std::memcpy(b.data(), words.data(), b.size());
  return b;
}

float LoadFloat(const std::vector<std::byte>& frame, std::size_t at) {
  float v;
  std::memcpy(&v, frame.data() + at, 4);
  return v;
}
uint32_t LoadU32(const std::vector<std::byte>& frame, std::size_t at) {
  uint32_t v;
  std::memcpy(&v, frame.data() + at, 4);
  return v;
}

// qsgd's code frame by the definition, with the norms the encoder sent (its summation order
// is the encoder's business; the norms are checked against double sums apart): element i
// of bucket b = i / d rounds |x_i| * (s / norm_b).
std::vector<std::byte> ReferenceQsgd(std::span<const float> x, uint32_t s, std::size_t d,
                                     std::span<const float> norms, uint64_t seed) {
  auto lanes = Lanes(seed);
  const int bits = 1 + std::bit_width(s);
  std::vector<uint64_t> words(PackedWords(x.size(), bits));
  BitWriter w(words.data(), bits);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float norm = norms[i / d];
    const float per_norm = norm > 0 ? static_cast<float>(s) / norm : 0.0f;
    const float u = Uniform(lanes, i);
    const float r = std::min(static_cast<float>(s), std::fabs(x[i]) * per_norm);
    const float fl = std::floor(r);
    const auto level = static_cast<uint64_t>(fl) + (u < r - fl ? 1 : 0);
    w.Put(level << 1 | (level > 0 && x[i] < 0 ? 1 : 0));
  }
  w.Finish();
  return Bytes(words);
}

// terngrad's frames by the definition (terngrad.cc): per piece, sigma = sqrt(sum x^2 / m)
// in double, the bound c sigma rounded to float, the scale max min(|x_i|, bound), then
// keep element i with probability min(|x_i|, bound) / scale.
std::vector<std::vector<std::byte>> ReferenceTernGrad(std::span<const float> x,
                                                      std::span<const int64_t> pieces, double clip,
                                                      uint64_t seed) {
  std::vector<int64_t> p(pieces.begin(), pieces.end());
  if (p.empty()) p.push_back(static_cast<int64_t>(x.size()));
  const std::size_t m = p.size();
  std::vector<std::byte> head(4 + 8 * m);
  const auto m32 = static_cast<uint32_t>(m);
  std::memcpy(head.data(), &m32, 4);
  std::vector<float> bound(x.size()), inv(x.size());
  std::size_t at = 0;
  for (std::size_t j = 0; j < m; ++j) {
    const auto len = static_cast<std::size_t>(p[j]);
    double sq = 0;
    for (std::size_t i = at; i < at + len; ++i) sq += double{x[i]} * x[i];
    const float b = clip > 0 ? static_cast<float>(clip * std::sqrt(sq / static_cast<double>(len)))
                             : std::numeric_limits<float>::infinity();
    float scale = 0;
    for (std::size_t i = at; i < at + len; ++i)
      scale = std::max(scale, std::min(std::fabs(x[i]), b));
    for (std::size_t i = at; i < at + len; ++i) {
      bound[i] = b;
      inv[i] = scale > 0 ? 1.0f / scale : 0.0f;
    }
    const auto count = static_cast<uint32_t>(len);
    std::memcpy(head.data() + 4 + 4 * j, &count, 4);
    std::memcpy(head.data() + 4 + 4 * m + 4 * j, &scale, 4);
    at += len;
  }
  auto lanes = Lanes(seed);
  std::vector<uint64_t> words(PackedWords(x.size(), 2));
  BitWriter w(words.data(), 2);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float u = Uniform(lanes, i);
    const bool keep = u < std::min(std::fabs(x[i]), bound[i]) * inv[i];
    w.Put(!keep ? 0 : x[i] < 0 ? 2 : 1);
  }
  w.Finish();
  return {head, Bytes(words)};
}

// Lengths around the 64-element blocks and the 64-bit words, for every tail position.
std::vector<std::size_t> Lengths() {
  std::vector<std::size_t> n;
  for (std::size_t i = 1; i <= 130; ++i) n.push_back(i);
  for (std::size_t i : {191, 192, 193, 255, 256, 257, 1000, 4097}) n.push_back(i);
  return n;
}

// Piece lengths summing to n: none (one piece), ones (a piece per element, every block
// mixed), and pieces of 1 to 150 elements (blocks inside one piece and across several).
std::vector<std::vector<int64_t>> PieceSplits(std::size_t n, uint64_t seed) {
  std::vector<std::vector<int64_t>> splits = {{}};
  splits.emplace_back(n, 1);
  Rng rng(seed);
  std::vector<int64_t> random;
  for (std::size_t left = n; left > 0;) {
    const auto len = std::min<std::size_t>(left, 1 + rng.UniformInt(150));
    random.push_back(static_cast<int64_t>(len));
    left -= len;
  }
  splits.push_back(random);
  return splits;
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

// Every width at the default bucket and one bucket per vector; a few widths at buckets that
// are multiples of 64 (blocks inside a bucket), that are not (blocks across buckets), and
// of one element.
TEST(Quantize, QsgdEqualsTheReferenceAtEveryLengthWidthAndBucket) {
  std::vector<std::pair<int64_t, std::vector<int>>> cases;
  const std::vector<int> every = {1, 2, 3, 7, 15, 16, 127, 128, 255, 32768};
  const std::vector<int> some = {1, 15, 255, 32768};
  cases.emplace_back(512, every);
  cases.emplace_back(kMaxQsgdBucket, every);
  for (int64_t d : {1, 7, 64, 100, 128, 130}) cases.emplace_back(d, some);
  for (const auto& [d, widths] : cases) {
    for (int levels : widths) {
      auto c = Make("qsgd", levels, d);
      for (std::size_t n : Lengths()) {
        const std::vector<float> x = RandomVector(n, n);
        Rng rng(n * 31 + static_cast<uint64_t>(levels)), seeds = rng;
        Encoded e;
        c->Encode(x, rng, &e);
        const auto du = static_cast<std::size_t>(d);
        const std::size_t buckets = (n + du - 1) / du;
        ASSERT_EQ(e.frames[0].size(), 8 + 4 * buckets) << "d = " << d << ", n = " << n;
        ASSERT_EQ(LoadU32(e.frames[0], 0), static_cast<uint32_t>(levels));
        ASSERT_EQ(LoadU32(e.frames[0], 4), static_cast<uint32_t>(d));
        std::vector<float> norms(buckets);
        for (std::size_t b = 0; b < buckets; ++b) {
          norms[b] = LoadFloat(e.frames[0], 8 + 4 * b);
          double sq = 0;
          for (std::size_t i = b * du; i < std::min(n, (b + 1) * du); ++i)
            sq += double{x[i]} * x[i];
          ASSERT_NEAR(norms[b], std::sqrt(sq), 1e-6 * std::sqrt(sq)) << "bucket " << b;
        }
        ASSERT_EQ(e.frames[1], ReferenceQsgd(x, levels, du, norms, seeds.NextU64()))
            << "s = " << levels << ", d = " << d << ", n = " << n;
      }
    }
  }
}

TEST(Quantize, TernGradEqualsTheReferenceAtEveryLengthPiecesAndClip) {
  for (double clip : {0.0, 2.5, 0.5}) {
    auto c = Make("terngrad", 15, 512, clip);
    for (std::size_t n : Lengths()) {
      const std::vector<float> x = RandomVector(n, n + 1000);
      for (const std::vector<int64_t>& pieces : PieceSplits(n, n)) {
        Rng rng(n), seeds = rng;
        Encoded e;
        c->Encode(x, rng, &e, pieces);
        const auto want = ReferenceTernGrad(x, pieces, clip, seeds.NextU64());
        ASSERT_EQ(e.frames[0], want[0])
            << "clip " << clip << " n = " << n << ", " << pieces.size() << " pieces";
        ASSERT_EQ(e.frames[1], want[1])
            << "clip " << clip << " n = " << n << ", " << pieces.size() << " pieces";
      }
    }
  }
}

// The reference decoder: compressor.h's value of element i, "" or refused.
bool ReferenceDecode(const Encoded& e, std::vector<float>* out) {
  const bool qsgd = e.encoding == Encoding::kQsgd;
  const std::vector<std::byte>& head = e.frames[0];
  const std::size_t n = out->size();
  std::vector<float> scale_of(n);  // the norm or scale element i takes
  uint32_t s = 0;
  if (qsgd) {
    if (head.size() < 8) return false;
    s = LoadU32(head, 0);
    const uint32_t d = LoadU32(head, 4);
    if (s == 0 || s > kMaxQsgdLevels || d == 0) return false;
    const std::size_t buckets = (n + d - 1) / d;
    if (head.size() != 8 + 4 * buckets) return false;
    for (std::size_t i = 0; i < n; ++i) scale_of[i] = LoadFloat(head, 8 + 4 * (i / d));
  } else {
    if (head.size() < 4) return false;
    const uint32_t m = LoadU32(head, 0);
    if (m == 0 || m > n || head.size() != 4 + 8 * std::size_t{m}) return false;
    std::size_t at = 0;
    for (uint32_t j = 0; j < m; ++j) {
      const uint32_t count = LoadU32(head, 4 + 4 * j);
      if (count == 0 || count > n - at) return false;
      for (std::size_t i = at; i < at + count; ++i)
        scale_of[i] = LoadFloat(head, 4 + 4 * m + 4 * j);
      at += count;
    }
    if (at != n) return false;
  }
  for (float v : scale_of) {
    if (!(std::isfinite(v) && v >= 0)) return false;
  }
  const int bits = qsgd ? 1 + std::bit_width(s) : 2;
  if (e.frames[1].size() != PackedWords(n, bits) * 8) return false;
  BitReader r(e.frames[1].data(), bits);
  for (std::size_t i = 0; i < n; ++i) {
    const uint64_t code = r.Get();
    float& v = (*out)[i];
    if (qsgd) {
      const uint64_t level = code >> 1;
      if (level > s || (level == 0 && (code & 1))) return false;
      const float mag = scale_of[i] / static_cast<float>(s) * static_cast<float>(level);
      v = (code & 1) ? -mag : mag;
    } else {
      if (code == 3) return false;
      v = code == 0 ? 0.0f : code == 1 ? scale_of[i] : -scale_of[i];
    }
  }
  return r.RestIsZero();
}

// Decode of valid streams and of streams with one code, padding, norm, scale, count or
// header bit spoiled, at every length and width, for buckets inside and across blocks and
// terngrad's pieces: the fast
// decoder accepts exactly what the reference accepts and writes the same floats (or
// nothing).
TEST(Quantize, DecodeEqualsTheReference) {
  Rng pick(5);
  struct Case {
    const char* name;
    int levels;
    int64_t bucket;
  };
  const Case cases[] = {{"terngrad", 15, 512}, {"qsgd", 1, 512},   {"qsgd", 3, 512},
                        {"qsgd", 4, 512},      {"qsgd", 15, 512},  {"qsgd", 63, 512},
                        {"qsgd", 100, 512},    {"qsgd", 127, 512}, {"qsgd", 255, 512},
                        {"qsgd", 15, 100},     {"qsgd", 15, 1},    {"qsgd", 255, 100},
                        {"qsgd", 15, 64}};
  for (const Case& k : cases) {
    auto c = Make(k.name, k.levels, k.bucket);
    for (std::size_t n : Lengths()) {
      const std::vector<float> x = RandomVector(n, n + 7);
      for (const std::vector<int64_t>& pieces : PieceSplits(n, n + 3)) {
        if (!pieces.empty() && std::string(k.name) == "qsgd") continue;  // qsgd ignores them
        Rng rng(n);
        Encoded e;
        c->Encode(x, rng, &e, pieces);
        for (int spoil = 0; spoil < 6; ++spoil) {
          // Flip one random bit of the code frame (padding included), or of the frame of
          // s, d and the norms, or of the piece table.
          Encoded bad = e;
          if (spoil > 0) {
            std::vector<std::byte>& f = bad.frames[spoil < 4 ? 1 : 0];
            const std::size_t bit = pick.UniformInt(f.size() * 8);
            f[bit / 8] ^= std::byte{static_cast<unsigned char>(1u << (bit % 8))};
          }
          std::vector<float> want(n, 7.0f), got(n, 7.0f);
          const bool ok = ReferenceDecode(bad, &want);
          const std::string problem = Decode(bad, got);
          ASSERT_EQ(problem.empty(), ok) << k.name << " s = " << k.levels << " d = " << k.bucket
                                         << " n = " << n << ": " << problem;
          if (ok) {
            ASSERT_EQ(std::memcmp(got.data(), want.data(), n * 4), 0) << k.name << " n = " << n;
          } else {
            ASSERT_EQ(got, std::vector<float>(n, 7.0f)) << k.name << " wrote before refusing";
          }
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
  struct Case {
    const char* name;
    int levels;
    int64_t bucket;
    double clip;
    std::vector<int64_t> pieces;
  };
  const Case cases[] = {
      {"qsgd", 1, 512, 0, {}},      {"qsgd", 15, 512, 0, {}},
      {"qsgd", 255, 512, 0, {}},    {"qsgd", 15, kMaxQsgdBucket, 0, {}},
      {"qsgd", 15, 100, 0, {}},     {"terngrad", 15, 512, 2.5, {}},
      {"terngrad", 15, 512, 0, {}}, {"terngrad", 15, 512, 2.5, {300, 1, 450, 249}}};
  const uint64_t pinned[] = {0x634caca022d9c17eULL, 0xc00f354e7df0f727ULL, 0x9c843e58d6f86bd4ULL,
                             0x40fdbcda32dc9063ULL, 0x08aedf18d77ef7e4ULL, 0xb44c64091150a362ULL,
                             0x5a2fdc57ad7340a7ULL, 0xb516351088d1dd3bULL};
  for (std::size_t k = 0; k < std::size(cases); ++k) {
    const Case& c = cases[k];
    Rng rng(2026);
    Encoded e;
    Make(c.name, c.levels, c.bucket, c.clip)->Encode(x, rng, &e, c.pieces);
    EXPECT_EQ(Digest(e), pinned[k])
        << c.name << " s = " << c.levels << " d = " << c.bucket << " clip " << c.clip << ", "
        << c.pieces.size() << " pieces: 0x" << std::hex << Digest(e);
  }
}

}  // namespace
}  // namespace asgd::compression
