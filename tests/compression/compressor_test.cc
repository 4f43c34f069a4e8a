#include "compression/compressor.h"

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/rng.h"

namespace asgd::compression {
namespace {

std::unique_ptr<Compressor> Make(const std::string& name, double ratio = 0.25, int levels = 15) {
  CompressionOptions o;
  o.name = name;
  o.ratio = ratio;
  o.levels = levels;
  return NewCompressor(o);
}

std::vector<float> RandomVector(std::size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(rng.Normal());
  return x;
}

std::vector<float> RoundTrip(const Compressor& c, std::span<const float> x, Rng& rng,
                             Encoded* e = nullptr) {
  Encoded local;
  Encoded* enc = e != nullptr ? e : &local;
  c.Encode(x, rng, enc);
  std::vector<float> out(x.size());
  const std::string problem = Decode(*enc, out);
  EXPECT_EQ(problem, "");
  return out;
}

const std::vector<std::string> kCompressors = {"topk", "randk", "qsgd", "sign", "terngrad"};

TEST(Compressor, RegistryNamesEveryCompressorAndNone) {
  std::vector<std::string> want = kCompressors;
  want.push_back("none");
  std::sort(want.begin(), want.end());
  EXPECT_EQ(CompressorNames(), want);
  EXPECT_EQ(Make("none"), nullptr);
  for (const std::string& n : kCompressors) {
    auto c = Make(n);
    ASSERT_NE(c, nullptr) << n;
    EXPECT_EQ(c->Name(), n);
    EXPECT_EQ(EncodingName(c->encoding()), n);
    EXPECT_FALSE(CompressorDescription(n).empty());
  }
}

TEST(Compressor, BadOptionsNameTheKey) {
  auto key_of = [](CompressionOptions o) {
    try {
      NewCompressor(o);
    } catch (const ConfigError& e) {
      return e.key();
    }
    return std::string("no error");
  };
  CompressionOptions o;
  o.name = "zip";
  EXPECT_EQ(key_of(o), "compression.name");
  o = {};
  o.name = "topk";
  o.ratio = 0;
  EXPECT_EQ(key_of(o), "compression.ratio");
  o.ratio = 1.5;
  EXPECT_EQ(key_of(o), "compression.ratio");
  o = {};
  o.name = "qsgd";
  o.levels = 0;
  EXPECT_EQ(key_of(o), "compression.levels");
  o.levels = static_cast<int>(kMaxQsgdLevels) + 1;
  EXPECT_EQ(key_of(o), "compression.levels");
  o = {};
  o.error_feedback = true;
  EXPECT_EQ(key_of(o), "compression.error_feedback");
}

TEST(TopK, KeepingEverythingIsExact) {
  auto c = Make("topk", 1.0);
  Rng rng(1);
  for (std::size_t n : {1u, 2u, 63u, 64u, 65u, 1000u}) {
    const std::vector<float> x = RandomVector(n, n);
    const std::vector<float> back = RoundTrip(*c, x, rng);
    EXPECT_EQ(std::memcmp(back.data(), x.data(), n * 4), 0) << n;
  }
}

TEST(TopK, KeepsTheLargestMagnitudes) {
  auto c = Make("topk", 0.3);  // k = round(0.3 * 10) = 3
  const std::vector<float> x = {0.1f, -5, 0.2f, 3, -0.3f, 0, 4, 0.5f, -0.6f, 0.7f};
  Rng rng(1);
  Encoded e;
  const std::vector<float> back = RoundTrip(*c, x, rng, &e);
  EXPECT_EQ(back, (std::vector<float>{0, -5, 0, 3, 0, 0, 4, 0, 0, 0}));
  EXPECT_EQ(e.bytes(), 3 * 8);
}

// Against the definition, sorted by magnitude (ties to the lower index): small vectors
// (one nth_element) and large ones (the sampled threshold), with many ties and a spike.
TEST(TopK, MatchesTheDefinitionAtEverySizeAndWithTies) {
  for (std::size_t n : {1u, 7u, 100u, 16385u, 50000u, 200003u}) {
    for (const bool ties : {false, true}) {
      std::vector<float> x = RandomVector(n, n + ties);
      if (ties) {
        for (float& v : x) v = std::round(v * 2) / 2;  // few distinct magnitudes
      }
      x[n / 2] = 1e6f;
      for (double ratio : {0.001, 0.01, 0.2, 1.0}) {
        auto c = Make("topk", ratio);
        Rng rng(1);
        Encoded e;
        c->Encode(x, rng, &e);
        const auto k = static_cast<std::size_t>(
            std::clamp<long long>(std::llround(ratio * static_cast<double>(n)), 1, n));
        std::vector<uint32_t> order(n);
        std::iota(order.begin(), order.end(), 0u);
        std::stable_sort(order.begin(), order.end(), [&x](uint32_t a, uint32_t b) {
          return std::fabs(x[a]) > std::fabs(x[b]);
        });
        order.resize(k);
        std::sort(order.begin(), order.end());
        std::vector<uint32_t> got(e.frames[0].size() / 4);
        std::memcpy(got.data(), e.frames[0].data(), e.frames[0].size());
        ASSERT_EQ(got, order) << "n " << n << " ratio " << ratio << " ties " << ties;
      }
    }
  }
}

TEST(Sign, SendsTheSignTimesTheMeanMagnitude) {
  auto c = Make("sign");
  const std::vector<float> x = {1, -2, 0, 4, -1};
  Rng rng(1);
  Encoded e;
  const std::vector<float> back = RoundTrip(*c, x, rng, &e);
  const float s = 8.0f / 5.0f;
  EXPECT_EQ(back, (std::vector<float>{s, -s, s, s, -s}));
  EXPECT_EQ(e.bytes(), 4 + 8);
}

TEST(Qsgd, PacksInAsFewBitsAsTheLevelsNeed) {
  Rng rng(1);
  const std::vector<float> x = RandomVector(640, 5);
  for (auto [levels, bits] : {std::pair{1, 2}, {3, 3}, {4, 4}, {15, 5}, {16, 6}, {255, 9}}) {
    Encoded e;
    Make("qsgd", 0.1, levels)->Encode(x, rng, &e);
    EXPECT_EQ(e.frames[1].size(), 640u * bits / 8) << "s = " << levels;
  }
}

// The variance of each unbiased compressor's estimate of x_i, from its definition.
double Variance(const std::string& name, std::span<const float> x, std::size_t i, double ratio,
                int levels) {
  const double xi = std::fabs(x[i]);
  if (name == "randk") {
    const double n = static_cast<double>(x.size());
    const double k = std::max(1.0, std::round(ratio * n));
    return xi * xi * (n / k - 1);
  }
  if (name == "qsgd") {
    double sq = 0;
    for (float v : x) sq += double{v} * v;
    const double step = std::sqrt(sq) / levels;
    const double f = xi / step - std::floor(xi / step);
    return step * step * f * (1 - f);
  }
  double m = 0;  // terngrad
  for (float v : x) m = std::max(m, std::fabs(double{v}));
  return xi * m - xi * xi;
}

// E[decode(encode(x))] = x: the mean of N seeded draws lies within 6 standard errors
// (sqrt(var / N), var from the compressor's definition) of x_i, plus the bias the float
// arithmetic allows (probabilities drawn with 24 bits, values rounded to float: a few
// 2^-23 relative to the coordinate's quantization step).
TEST(Unbiased, MeanOfSeededDrawsConvergesToX) {
  constexpr int kDraws = 4000;
  constexpr double kRatio = 0.25;
  constexpr int kLevels = 3;
  const std::vector<float> x = RandomVector(67, 11);
  for (const std::string name : {"randk", "qsgd", "terngrad"}) {
    auto c = Make(name, kRatio, kLevels);
    ASSERT_TRUE(c->unbiased());
    Rng rng(DeriveSeed(42, name));
    std::vector<double> sum(x.size(), 0.0);
    int differs = 0;
    for (int d = 0; d < kDraws; ++d) {
      const std::vector<float> back = RoundTrip(*c, x, rng);
      for (std::size_t i = 0; i < x.size(); ++i) {
        sum[i] += back[i];
        differs += back[i] != x[i];
      }
    }
    EXPECT_GT(differs, 0) << name << " never changed x: the test would prove nothing";
    double largest = 0;
    for (float v : x) largest = std::max(largest, std::fabs(double{v}) * x.size());
    // Each coordinate on its own, and all together: sum_i z_i^2 of the standardised
    // errors is chi-square with n degrees of freedom (mean n, sd sqrt(2n)) when unbiased,
    // which catches a small bias shared by all coordinates that 6 sigma each would miss.
    const double rounding = 8 * std::ldexp(1.0, -23) * largest;
    double chi2 = 0;
    int dof = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double se = std::sqrt(Variance(name, x, i, kRatio, kLevels) / kDraws);
      const double err = std::fabs(sum[i] / kDraws - x[i]);
      EXPECT_LE(err, 6 * se + rounding) << name << " element " << i << " of " << x[i];
      if (se > 0) {
        const double z = std::max(0.0, err - rounding) / se;
        chi2 += z * z;
        ++dof;
      }
    }
    EXPECT_LE(chi2, dof + 6 * std::sqrt(2.0 * dof)) << name << " over " << dof << " coordinates";
  }
}

// Under error feedback the unbiased compressors become contractions (compressor.h), on
// small exact cases: randk sends its k coordinates unscaled; qsgd's norm and terngrad's
// scale are divided by 1 + w, w = E||U(x) - x||^2 / ||x||^2 of this x.
TEST(ErrorFeedbackForms, AreTheContractionsOfTheirUnbiasedCompressors) {
  CompressionOptions o;
  o.error_feedback = true;
  Rng rng(5);
  // qsgd, s = 1, x = (3, 4): ||x|| = 5, r = (0.6, 0.8), w = 5^2 (0.6 * 0.4 + 0.8 * 0.2) / 25
  // = 0.4, norm sent 5 / 1.4.
  o.name = "qsgd";
  o.levels = 1;
  auto qsgd = NewCompressor(o);
  EXPECT_FALSE(qsgd->unbiased());
  EXPECT_TRUE(qsgd->contractive());
  Encoded e;
  qsgd->Encode(std::vector<float>{3, 4}, rng, &e);
  float norm;
  std::memcpy(&norm, e.frames[0].data(), 4);
  EXPECT_FLOAT_EQ(norm, 5.0f / 1.4f);
  // terngrad, x = (1, -0.5, 0.25): s = 1, w = (0 + 0.25 + 0.1875) / 1.3125 = 1/3, scale 0.75.
  o.name = "terngrad";
  auto tern = NewCompressor(o);
  EXPECT_TRUE(tern->contractive());
  tern->Encode(std::vector<float>{1, -0.5f, 0.25f}, rng, &e);
  float scale;
  std::memcpy(&scale, e.frames[0].data(), 4);
  EXPECT_FLOAT_EQ(scale, 0.75f);
  // On the grid (w = 0: qsgd's r all integers) nothing is scaled.
  qsgd->Encode(std::vector<float>{0, 2, 0}, rng, &e);
  std::memcpy(&norm, e.frames[0].data(), 4);
  EXPECT_EQ(norm, 2.0f);
  // randk with ratio 0.5 of 4: two coordinates, as they are.
  o.name = "randk";
  o.ratio = 0.5;
  auto randk = NewCompressor(o);
  EXPECT_TRUE(randk->contractive());
  const std::vector<float> x = {1, -2, 3, -4};
  const std::vector<float> back = RoundTrip(*randk, x, rng);
  int kept = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (back[i] != 0) {
      EXPECT_EQ(back[i], x[i]) << i;
      ++kept;
    }
  }
  EXPECT_EQ(kept, 2);
  // Without error feedback: unbiased, not contractions; topk and sign are contractions.
  for (const std::string& name : kCompressors) {
    auto plain = Make(name);
    EXPECT_EQ(plain->unbiased(), name == "randk" || name == "qsgd" || name == "terngrad") << name;
    EXPECT_EQ(plain->contractive(), !plain->unbiased()) << name;
  }
}

// The error feedback forms of qsgd and terngrad in mean: E[C(x)] = x / (1 + w), w from the
// variance of each coordinate's definition (Variance above); randk's E[C(x)] = (k / n) x.
TEST(ErrorFeedbackForms, MeanOfSeededDrawsIsTheScaledX) {
  constexpr int kDraws = 4000;
  constexpr double kRatio = 0.25;
  constexpr int kLevels = 3;
  const std::vector<float> x = RandomVector(67, 11);
  double sq = 0;
  for (float v : x) sq += double{v} * v;
  for (const std::string name : {"randk", "qsgd", "terngrad"}) {
    CompressionOptions o;
    o.name = name;
    o.ratio = kRatio;
    o.levels = kLevels;
    o.error_feedback = true;
    auto c = NewCompressor(o);
    double var = 0;
    for (std::size_t i = 0; i < x.size(); ++i) var += Variance(name, x, i, kRatio, kLevels);
    const double k = std::round(kRatio * static_cast<double>(x.size()));
    const double factor =
        name == "randk" ? k / static_cast<double>(x.size()) : 1 / (1 + var / sq);
    Rng rng(DeriveSeed(43, name));
    std::vector<double> sum(x.size(), 0.0);
    for (int d = 0; d < kDraws; ++d) {
      const std::vector<float> back = RoundTrip(*c, x, rng);
      for (std::size_t i = 0; i < x.size(); ++i) sum[i] += back[i];
    }
    for (std::size_t i = 0; i < x.size(); ++i) {
      // The scaled estimate's variance: the unbiased one's times factor^2 (randk: each
      // coordinate kept with probability k / n, x_i^2 (k / n)(1 - k / n)).
      const double vi = name == "randk" ? x[i] * x[i] * factor * (1 - factor)
                                        : Variance(name, x, i, kRatio, kLevels) * factor * factor;
      const double se = std::sqrt(vi / kDraws);
      EXPECT_NEAR(sum[i] / kDraws, factor * x[i], 6 * se + 1e-5 * std::fabs(x[i]))
          << name << " element " << i;
    }
  }
}

TEST(Stochastic, SameSeedSameEncoding) {
  const std::vector<float> x = RandomVector(300, 2);
  for (const std::string& name : kCompressors) {
    auto c = Make(name);
    Rng a(9), b(9);
    Encoded ea, eb;
    c->Encode(x, a, &ea);
    c->Encode(x, b, &eb);
    EXPECT_EQ(ea.frames, eb.frames) << name;
  }
}

using Frames = std::vector<std::span<const std::byte>>;
Frames View(const Encoded& e) { return Frames(e.frames.begin(), e.frames.end()); }

// Every truncation and mislabelling is refused, and a refused decode writes nothing.
TEST(Decode, RefusesTruncatedEncodings) {
  const std::vector<float> x = RandomVector(1000, 4);
  for (const std::string& name : kCompressors) {
    Rng rng(1);
    Encoded e;
    Make(name)->Encode(x, rng, &e);
    std::vector<float> out(x.size(), 7.0f);
    for (std::size_t f = 0; f < e.frames.size(); ++f) {
      for (std::size_t cut : {std::size_t{1}, std::size_t{4}, e.frames[f].size()}) {
        Frames frames = View(e);
        frames[f] = frames[f].first(frames[f].size() - std::min(cut, frames[f].size()));
        EXPECT_NE(Decode(e.encoding, frames, out), "") << name << " frame " << f << " cut " << cut;
      }
    }
    Frames fewer = View(e);
    fewer.pop_back();
    EXPECT_NE(Decode(e.encoding, fewer, out), "") << name;
    Frames more = View(e);
    more.push_back(more.back());
    EXPECT_NE(Decode(e.encoding, more, out), "") << name;
    // The packed forms have one size per element count; the sparse form is valid for any
    // count above its largest index (the count travels in the message header).
    std::vector<float> longer(x.size() + 64);
    const bool sparse = e.encoding == Encoding::kTopK || e.encoding == Encoding::kRandK;
    EXPECT_EQ(Decode(e.encoding, View(e), longer).empty(), sparse) << name << " into more";
    std::vector<float> shorter(x.size() - 64);  // a word fewer in every packed form
    if (!sparse) {
      EXPECT_NE(Decode(e.encoding, View(e), shorter), "") << name << " into fewer";
    }
    EXPECT_EQ(out, std::vector<float>(x.size(), 7.0f)) << name << " wrote before refusing";
  }
}

TEST(Decode, RefusesMislabelledEncodings) {
  const std::vector<float> x = RandomVector(1000, 4);
  for (const std::string& name : kCompressors) {
    Rng rng(1);
    Encoded e;
    Make(name)->Encode(x, rng, &e);
    std::vector<float> out(x.size());
    for (uint32_t label = 0; label < kEncodingEnd + 2; ++label) {
      const auto as = static_cast<Encoding>(label);
      const bool same_form = (as == Encoding::kTopK || as == Encoding::kRandK) &&
                             (e.encoding == Encoding::kTopK || e.encoding == Encoding::kRandK);
      if (as == e.encoding || same_form) continue;
      EXPECT_NE(Decode(as, View(e), out), "") << name << " read as " << label;
    }
  }
}

TEST(Decode, RefusesBadFields) {
  std::vector<float> out(100);
  auto refused = [&](Encoded e) { return !Decode(e, out).empty(); };
  Rng rng(1);
  const std::vector<float> x = RandomVector(100, 8);
  auto encode = [&](const std::string& name) {
    Encoded e;
    Make(name)->Encode(x, rng, &e);
    return e;
  };
  auto set32 = [](Encoded& e, std::size_t f, std::size_t at, auto v) {
    std::memcpy(e.frames[f].data() + at, &v, 4);
  };
  Encoded sparse = encode("topk");  // 25 pairs
  Encoded bad = sparse;
  set32(bad, 0, 4, uint32_t{0});  // index 1 <= index 0
  EXPECT_TRUE(refused(bad));
  bad = sparse;
  set32(bad, 0, 24 * 4, uint32_t{100});  // last index out of range
  EXPECT_TRUE(refused(bad));
  bad = sparse;
  bad.frames[1].resize(bad.frames[1].size() - 4);  // fewer values than indices
  EXPECT_TRUE(refused(bad));

  Encoded q = encode("qsgd");
  bad = q;
  set32(bad, 0, 0, std::nanf(""));
  EXPECT_TRUE(refused(bad));
  bad = q;
  set32(bad, 0, 0, -1.0f);
  EXPECT_TRUE(refused(bad));
  bad = q;
  set32(bad, 0, 4, uint32_t{0});  // s = 0
  EXPECT_TRUE(refused(bad));
  bad = q;
  set32(bad, 0, 4, uint32_t{16});  // s = 16 needs 6-bit codes, the frame has 5-bit ones
  EXPECT_TRUE(refused(bad));
  bad = q;
  bad.frames[1][0] = std::byte{0x1f};  // first code: level 15, negative: fine
  EXPECT_FALSE(refused(bad));
  set32(bad, 0, 4, uint32_t{14});  // level 15 > s = 14 (14 also needs 5 bits)
  EXPECT_TRUE(refused(bad));
  bad = q;
  bad.frames[1][0] = (bad.frames[1][0] & std::byte{0xe0}) | std::byte{0x01};  // sign on level 0
  EXPECT_TRUE(refused(bad));
  bad = q;
  bad.frames[1].back() |= std::byte{0x80};  // 500 bits in 8 words: padding
  EXPECT_TRUE(refused(bad));

  Encoded s = encode("sign");
  bad = s;
  set32(bad, 0, 0, std::numeric_limits<float>::infinity());
  EXPECT_TRUE(refused(bad));
  bad = s;
  bad.frames[1].back() |= std::byte{0x80};  // 100 bits in 2 words: padding
  EXPECT_TRUE(refused(bad));

  Encoded t = encode("terngrad");
  bad = t;
  bad.frames[1][0] |= std::byte{0x03};  // code 3
  EXPECT_TRUE(refused(bad));
  bad = t;
  bad.frames[1].back() |= std::byte{0x80};  // 200 bits in 4 words: padding
  EXPECT_TRUE(refused(bad));
}

}  // namespace
}  // namespace asgd::compression
