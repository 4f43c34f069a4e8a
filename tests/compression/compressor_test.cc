#include "compression/compressor.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "compression/error_feedback.h"
#include "core/error.h"
#include "core/rng.h"

namespace asgd::compression {
namespace {

std::unique_ptr<Compressor> Make(const std::string& name, double ratio = 0.25, int levels = 15,
                                 int64_t bucket = 512, double clip = 2.5,
                                 bool error_feedback = false) {
  CompressionOptions o;
  o.name = name;
  o.ratio = ratio;
  o.levels = levels;
  o.bucket = bucket;
  o.clip = clip;
  o.error_feedback = error_feedback;
  return NewCompressor(o);
}

std::vector<float> RandomVector(std::size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(rng.Normal());
  return x;
}

std::vector<float> RoundTrip(const Compressor& c, std::span<const float> x, Rng& rng,
                             Encoded* e = nullptr, std::span<const int64_t> pieces = {}) {
  Encoded local;
  Encoded* enc = e != nullptr ? e : &local;
  c.Encode(x, rng, enc, pieces);
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
  o.name = "qsgd";
  for (int64_t bucket : {int64_t{0}, int64_t{-512}, kMaxQsgdBucket + 1}) {
    o.bucket = bucket;
    EXPECT_EQ(key_of(o), "compression.bucket") << bucket;
  }
  o.bucket = kMaxQsgdBucket;
  EXPECT_EQ(key_of(o), "no error");
  o = {};
  o.name = "terngrad";
  for (double clip : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    o.clip = clip;
    EXPECT_EQ(key_of(o), "compression.clip") << clip;
  }
  o.clip = 0;
  EXPECT_EQ(key_of(o), "no error");
  o = {};
  o.error_feedback = true;
  EXPECT_EQ(key_of(o), "compression.error_feedback");
}

// Pieces must cover the vector with pieces of at least one element.
TEST(Compressor, EncodeChecksThePieces) {
  const std::vector<float> x = RandomVector(5, 1);
  Rng rng(1);
  Encoded e;
  for (const std::string& name : kCompressors) {
    auto c = Make(name);
    EXPECT_THROW(c->Encode(x, rng, &e, std::vector<int64_t>{2, 2}), InvariantError) << name;
    EXPECT_THROW(c->Encode(x, rng, &e, std::vector<int64_t>{5, 0}), InvariantError) << name;
    EXPECT_NO_THROW(c->Encode(x, rng, &e, std::vector<int64_t>{2, 3})) << name;
  }
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

// What a push moves, exactly: s, d and a norm per bucket, then the codes in whole words.
TEST(Qsgd, BytesAreTheNormsAndTheCodes) {
  Rng rng(1);
  for (std::size_t n : {1u, 63u, 64u, 511u, 512u, 513u, 1000u, 4096u}) {
    const std::vector<float> x = RandomVector(n, n);
    for (int64_t d : {int64_t{1}, int64_t{100}, int64_t{512}, kMaxQsgdBucket}) {
      Encoded e;
      Make("qsgd", 0.1, 15, d)->Encode(x, rng, &e);
      const std::size_t buckets =
          (n + static_cast<std::size_t>(d) - 1) / static_cast<std::size_t>(d);
      EXPECT_EQ(e.frames[0].size(), 8 + 4 * buckets) << "n " << n << " d " << d;
      EXPECT_EQ(e.bytes(), static_cast<int64_t>(8 + 4 * buckets + (5 * n + 63) / 64 * 8))
          << "n " << n << " d " << d;
    }
  }
}

// A bucket of values so small that s / ||x_b|| overflows float is sent as zeros, with norm
// 0, next to an ordinary bucket. (It used to send its zeros as level s and set padding
// bits, so the encoder's own output was refused, and error feedback stopped the worker.)
TEST(Qsgd, ABucketBelowTheFloatRangeIsSentAsZeros) {
  // Buckets of 4 and 3, and the tiny values alone (one bucket).
  for (const std::vector<float>& x : {std::vector<float>{1e-39f, 0, -2e-39f, 0, 3, -4, 0},
                                      std::vector<float>{1e-39f, 0, -2e-39f}}) {
    for (const bool ef : {false, true}) {
      auto c = Make("qsgd", 0.1, 15, 4, 2.5, ef);
      Rng rng(1);
      Encoded e;
      const std::vector<float> back = RoundTrip(*c, x, rng, &e);
      float norm0;
      std::memcpy(&norm0, e.frames[0].data() + 8, 4);
      EXPECT_EQ(norm0, 0.0f);
      for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(back[i], 0.0f) << i;
      if (ef) {
        ErrorFeedback feedback(static_cast<int64_t>(x.size()));
        EXPECT_NO_THROW(feedback.Encode(*c, x, rng, &e));
      }
    }
  }
}

// The per-element definitions the statistical tests check against: a bucket's or piece's
// [begin, end), terngrad's clipped value y_i (terngrad.cc) and its piece's scale.
struct Extent {
  std::size_t begin, end;
};
Extent BucketOf(std::size_t i, std::size_t n, int64_t bucket) {
  const auto d = static_cast<std::size_t>(bucket);
  return {i / d * d, std::min(n, (i / d + 1) * d)};
}
Extent PieceOf(std::size_t i, std::size_t n, std::span<const int64_t> pieces) {
  std::size_t at = 0;
  for (int64_t len : pieces) {
    if (i < at + static_cast<std::size_t>(len)) return {at, at + static_cast<std::size_t>(len)};
    at += static_cast<std::size_t>(len);
  }
  return {0, n};
}
float ClipBound(std::span<const float> x, Extent r, double clip) {
  if (clip == 0) return std::numeric_limits<float>::infinity();
  double sq = 0;
  for (std::size_t i = r.begin; i < r.end; ++i) sq += double{x[i]} * x[i];
  return static_cast<float>(clip * std::sqrt(sq / static_cast<double>(r.end - r.begin)));
}
// |y_i| and s_j of terngrad's piece of element i.
std::pair<double, double> Clipped(std::span<const float> x, std::size_t i,
                                  std::span<const int64_t> pieces, double clip) {
  const Extent r = PieceOf(i, x.size(), pieces);
  const float b = ClipBound(x, r, clip);
  double s = 0;
  for (std::size_t k = r.begin; k < r.end; ++k)
    s = std::max(s, double{std::min(std::fabs(x[k]), b)});
  return {std::min(std::fabs(x[i]), b), s};
}

struct Setting {
  std::string name;
  double ratio = 0.25;
  int levels = 3;
  int64_t bucket = 512;
  double clip = 0;
  std::vector<int64_t> pieces;
};
Setting Plain(std::string name) { return {std::move(name), 0.25, 3, 512, 0, {}}; }
Setting Qsgd(int levels, int64_t bucket) { return {"qsgd", 0.25, levels, bucket, 0, {}}; }
Setting TernGrad(double clip, std::vector<int64_t> pieces = {}) {
  return {"terngrad", 0.25, 3, 512, clip, std::move(pieces)};
}

// The variance of each stochastic compressor's estimate of x_i (of y_i for terngrad), from
// its definition.
double Variance(const Setting& c, std::span<const float> x, std::size_t i) {
  const double xi = std::fabs(x[i]);
  if (c.name == "randk") {
    const double n = static_cast<double>(x.size());
    const double k = std::max(1.0, std::round(c.ratio * n));
    return xi * xi * (n / k - 1);
  }
  if (c.name == "qsgd") {
    const Extent r = BucketOf(i, x.size(), c.bucket);
    double sq = 0;
    for (std::size_t k = r.begin; k < r.end; ++k) sq += double{x[k]} * x[k];
    const double step = std::sqrt(sq) / c.levels;
    const double f = xi / step - std::floor(xi / step);
    return step * step * f * (1 - f);
  }
  const auto [y, s] = Clipped(x, i, c.pieces, c.clip);  // terngrad
  return y * s - y * y;
}

std::string Describe(const Setting& c) {
  return c.name + " d " + std::to_string(c.bucket) + " clip " + std::to_string(c.clip) + " " +
         std::to_string(c.pieces.size()) + " pieces";
}

// E[decode(encode(x))] = x: the mean of N seeded draws lies within 6 standard errors
// (sqrt(var / N), var from the compressor's definition) of x_i, plus the bias the float
// arithmetic allows (probabilities drawn with 24 bits, values rounded to float: a few
// 2^-23 relative to the coordinate's quantization step). qsgd with buckets of 16 (the last
// of 3), inside blocks and across them, and with one norm; terngrad without clipping, one
// piece and three.
TEST(Unbiased, MeanOfSeededDrawsConvergesToX) {
  constexpr int kDraws = 4000;
  const std::vector<float> x = RandomVector(67, 11);
  const std::vector<Setting> settings = {Plain("randk"), Qsgd(3, 16), Qsgd(3, 512),
                                         Qsgd(3, 5),     TernGrad(0), TernGrad(0, {20, 1, 46})};
  for (const Setting& setting : settings) {
    SCOPED_TRACE(Describe(setting));
    auto c = Make(setting.name, setting.ratio, setting.levels, setting.bucket, setting.clip);
    ASSERT_TRUE(c->unbiased());
    Rng rng(DeriveSeed(42, setting.name));
    std::vector<double> sum(x.size(), 0.0);
    int differs = 0;
    for (int d = 0; d < kDraws; ++d) {
      const std::vector<float> back = RoundTrip(*c, x, rng, nullptr, setting.pieces);
      for (std::size_t i = 0; i < x.size(); ++i) {
        sum[i] += back[i];
        differs += back[i] != x[i];
      }
    }
    EXPECT_GT(differs, 0) << "never changed x: the test would prove nothing";
    double largest = 0;
    for (float v : x) largest = std::max(largest, std::fabs(double{v}) * x.size());
    // Each coordinate on its own, and all together: sum_i z_i^2 of the standardised
    // errors is chi-square with n degrees of freedom (mean n, sd sqrt(2n)) when unbiased,
    // which catches a small bias shared by all coordinates that 6 sigma each would miss.
    const double rounding = 8 * std::ldexp(1.0, -23) * largest;
    double chi2 = 0;
    int dof = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double se = std::sqrt(Variance(setting, x, i) / kDraws);
      const double err = std::fabs(sum[i] / kDraws - x[i]);
      EXPECT_LE(err, 6 * se + rounding) << "element " << i << " of " << x[i];
      if (se > 0) {
        const double z = std::max(0.0, err - rounding) / se;
        chi2 += z * z;
        ++dof;
      }
    }
    EXPECT_LE(chi2, dof + 6 * std::sqrt(2.0 * dof)) << "over " << dof << " coordinates";
  }
}

// With clipping (the default, c = 2.5) terngrad is unbiased for the clipped vector y, not
// for x: its mean is y_i (Wen et al. 2017, section 3.3), per piece, and the outliers' mean
// is their bound c sigma_j.
TEST(TernGrad, ClippedMeanIsTheClippedVector) {
  constexpr int kDraws = 4000;
  std::vector<float> x = RandomVector(67, 11);
  x[3] = 9;
  x[40] = -7;
  const std::vector<int64_t> pieces = {30, 37};
  const Setting setting = TernGrad(2.5, pieces);
  auto c = Make("terngrad");
  EXPECT_FALSE(c->unbiased());
  EXPECT_FALSE(c->contractive());
  Rng rng(3);
  std::vector<double> sum(x.size(), 0.0);
  for (int d = 0; d < kDraws; ++d) {
    const std::vector<float> back = RoundTrip(*c, x, rng, nullptr, pieces);
    for (std::size_t i = 0; i < x.size(); ++i) sum[i] += back[i];
  }
  int clipped = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double y = std::copysign(Clipped(x, i, pieces, 2.5).first, x[i]);
    clipped += y != x[i];
    const double se = std::sqrt(Variance(setting, x, i) / kDraws);
    EXPECT_NEAR(sum[i] / kDraws, y, 6 * se + 1e-5) << "element " << i << " of " << x[i];
  }
  EXPECT_GE(clipped, 2);
  EXPECT_LT(std::fabs(sum[3] / kDraws), 5.0);  // far below 9: clipped to 2.5 sigma
}

// Under error feedback the unbiased compressors become contractions (compressor.h), on
// small exact cases: randk sends its k coordinates unscaled; qsgd's norm of each bucket is
// divided by 1 + w_b, w_b = E||U(x_b) - x_b||^2 / ||x_b||^2 of this bucket; terngrad's scale
// of each piece is <y, x> / ||y||_1.
TEST(ErrorFeedbackForms, AreTheContractionsOfTheirUnbiasedCompressors) {
  Rng rng(5);
  auto norm_at = [](const Encoded& q, std::size_t b) {
    float v;
    std::memcpy(&v, q.frames[0].data() + 8 + 4 * b, 4);
    return v;
  };
  // qsgd, s = 1, x = (3, 4): ||x|| = 5, r = (0.6, 0.8), w = 5^2 (0.6 * 0.4 + 0.8 * 0.2) / 25
  // = 0.4, norm sent 5 / 1.4.
  auto qsgd = Make("qsgd", 0.25, 1, 512, 0, true);
  EXPECT_FALSE(qsgd->unbiased());
  EXPECT_TRUE(qsgd->contractive());
  Encoded e;
  qsgd->Encode(std::vector<float>{3, 4}, rng, &e);
  EXPECT_FLOAT_EQ(norm_at(e, 0), 5.0f / 1.4f);
  // On the grid (w = 0: qsgd's r all integers) nothing is scaled.
  qsgd->Encode(std::vector<float>{0, 2, 0}, rng, &e);
  EXPECT_EQ(norm_at(e, 0), 2.0f);
  // Each bucket on its own: buckets of 2, (3, 4) | (0, 2) | (-1): 5 / 1.4, 2 and 1.
  auto bucketed = Make("qsgd", 0.25, 1, 2, 0, true);
  bucketed->Encode(std::vector<float>{3, 4, 0, 2, -1}, rng, &e);
  ASSERT_EQ(e.frames[0].size(), 8u + 3 * 4);
  EXPECT_FLOAT_EQ(norm_at(e, 0), 5.0f / 1.4f);
  EXPECT_EQ(norm_at(e, 1), 2.0f);
  EXPECT_EQ(norm_at(e, 2), 1.0f);
  // terngrad without clipping, x = (1, -0.5, 0.25): ||x||^2 / ||x||_1 = 1.3125 / 1.75 =
  // 0.75 (s = 1, w = (0 + 0.25 + 0.1875) / 1.3125 = 1/3: s / (1 + w)).
  auto tern_at = [](const Encoded& t, std::size_t j) {
    uint32_t m;
    std::memcpy(&m, t.frames[0].data(), 4);
    float v;
    std::memcpy(&v, t.frames[0].data() + 4 + 4 * m + 4 * j, 4);
    return v;
  };
  auto tern = Make("terngrad", 0.25, 15, 512, 0, true);
  EXPECT_FALSE(tern->unbiased());
  EXPECT_TRUE(tern->contractive());
  tern->Encode(std::vector<float>{1, -0.5f, 0.25f}, rng, &e);
  EXPECT_FLOAT_EQ(tern_at(e, 0), 0.75f);
  // With clipping at c = 1, pieces (3, 1, 0, 0) | (-2): piece 0 has sigma = sqrt(10 / 4),
  // y = (sigma, 1, 0, 0), scale sent <y, x> / ||y||_1 = (3 sigma + 1) / (sigma + 1); piece
  // 1 (one element, sigma = 2: nothing clipped) sends 2.
  auto clipped = Make("terngrad", 0.25, 15, 512, 1.0, true);
  clipped->Encode(std::vector<float>{3, 1, 0, 0, -2}, rng, &e, std::vector<int64_t>{4, 1});
  const double sigma = static_cast<float>(std::sqrt(10.0 / 4));
  EXPECT_FLOAT_EQ(tern_at(e, 0), static_cast<float>((3 * sigma + 1) / (sigma + 1)));
  EXPECT_EQ(tern_at(e, 1), 2.0f);
  // randk with ratio 0.5 of 4: two coordinates, as they are.
  auto randk = Make("randk", 0.5, 15, 512, 0, true);
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
  // Without error feedback: randk, qsgd and terngrad without clipping are unbiased, not
  // contractions; topk and sign are contractions; terngrad with clipping is neither.
  for (const std::string& name : kCompressors) {
    auto plain = Make(name, 0.25, 15, 512, /*clip=*/0);
    EXPECT_EQ(plain->unbiased(), name == "randk" || name == "qsgd" || name == "terngrad") << name;
    EXPECT_EQ(plain->contractive(), !plain->unbiased()) << name;
  }
  auto clipping = Make("terngrad");
  EXPECT_FALSE(clipping->unbiased());
  EXPECT_FALSE(clipping->contractive());
}

// The error feedback forms in mean, from each coordinate's definition: qsgd's E[C(x)_i] =
// x_i / (1 + w_b) with w_b of i's bucket; terngrad's alpha_j y_i with alpha_j = <y_j, x_j> /
// (s_j ||y_j||_1) of i's piece; randk's (k / n) x_i.
TEST(ErrorFeedbackForms, MeanOfSeededDrawsIsTheScaledX) {
  constexpr int kDraws = 4000;
  std::vector<float> x = RandomVector(67, 11);
  x[3] = 9;  // an outlier for terngrad to clip
  const std::vector<Setting> settings = {Plain("randk"), Qsgd(3, 512), Qsgd(3, 16), TernGrad(0),
                                         TernGrad(2.5, {30, 1, 36})};
  for (const Setting& setting : settings) {
    SCOPED_TRACE(Describe(setting));
    auto c = Make(setting.name, setting.ratio, setting.levels, setting.bucket, setting.clip, true);
    // The expected value and the scaled estimate's variance of each coordinate.
    std::vector<double> mean(x.size()), var(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (setting.name == "randk") {
        const double f = std::round(setting.ratio * 67) / 67;
        mean[i] = f * x[i];
        var[i] = x[i] * x[i] * f * (1 - f);
      } else if (setting.name == "qsgd") {
        const Extent r = BucketOf(i, x.size(), setting.bucket);
        double sq = 0, v = 0;
        for (std::size_t k = r.begin; k < r.end; ++k) {
          sq += double{x[k]} * x[k];
          v += Variance(setting, x, k);
        }
        const double factor = 1 / (1 + v / sq);
        mean[i] = factor * x[i];
        var[i] = Variance(setting, x, i) * factor * factor;
      } else {
        const Extent r = PieceOf(i, x.size(), setting.pieces);
        double dot = 0, l1 = 0;
        for (std::size_t k = r.begin; k < r.end; ++k) {
          const double y = Clipped(x, k, setting.pieces, setting.clip).first;
          dot += y * std::fabs(x[k]);
          l1 += y;
        }
        const auto [y, s] = Clipped(x, i, setting.pieces, setting.clip);
        const double alpha = dot / (s * l1);
        mean[i] = std::copysign(alpha * y, x[i]);
        var[i] = Variance(setting, x, i) * alpha * alpha;
      }
    }
    Rng rng(DeriveSeed(43, setting.name));
    std::vector<double> sum(x.size(), 0.0);
    for (int d = 0; d < kDraws; ++d) {
      const std::vector<float> back = RoundTrip(*c, x, rng, nullptr, setting.pieces);
      for (std::size_t i = 0; i < x.size(); ++i) sum[i] += back[i];
    }
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double se = std::sqrt(var[i] / kDraws);
      EXPECT_NEAR(sum[i] / kDraws, mean[i], 6 * se + 1e-5 * std::fabs(x[i])) << "element " << i;
    }
  }
}

// What error feedback relies on, E||C(x) - x||^2 <= (1 - delta)||x||^2, measured: the mean
// squared error of N draws is the closed form of compressor.h (qsgd: sum_b w_b / (1 + w_b)
// ||x_b||^2; terngrad: sum_j ||x_j||^2 - <y_j, x_j>^2 / (s_j ||y_j||_1)) within 3 %, and the
// closed form is within the bound each method's analysis gives (qsgd: delta = 1 / (1 +
// min(d / s^2, sqrt(d) / s)); terngrad: min(1, c^2 / m) 2 / (1 + sqrt(m))). On a Gaussian
// vector with outliers, in buckets of 512 and 100 and in pieces.
TEST(ErrorFeedbackForms, ErrorIsTheClosedFormWithinTheContraction) {
  constexpr int kDraws = 400;
  constexpr std::size_t kN = 3000;
  std::vector<float> x = RandomVector(kN, 21);
  for (std::size_t i = 0; i < kN; i += 97) x[i] *= 20;
  double norm2 = 0;
  for (float v : x) norm2 += double{v} * v;
  const std::vector<int64_t> pieces = {1000, 1, 700, 1299};
  const std::vector<Setting> settings = {Qsgd(15, 512),       Qsgd(15, 100),         Qsgd(1, 512),
                                         TernGrad(0, pieces), TernGrad(2.5, pieces), TernGrad(2.5)};
  for (const Setting& setting : settings) {
    SCOPED_TRACE(Describe(setting));
    auto c = Make(setting.name, setting.ratio, setting.levels, setting.bucket, setting.clip, true);
    double closed = 0, delta = 1;
    if (setting.name == "qsgd") {
      const auto d = static_cast<std::size_t>(setting.bucket);
      for (std::size_t b = 0; b * d < kN; ++b) {
        double sq = 0, v = 0;
        for (std::size_t k = b * d; k < std::min(kN, (b + 1) * d); ++k) {
          sq += double{x[k]} * x[k];
          v += Variance(setting, x, k);
        }
        const double w = v / sq;
        closed += w / (1 + w) * sq;
      }
      const double s = setting.levels, dd = static_cast<double>(setting.bucket);
      delta = 1 / (1 + std::min(dd / (s * s), std::sqrt(dd) / s));
    } else {
      std::vector<int64_t> p = setting.pieces;
      if (p.empty()) p.push_back(kN);
      std::size_t at = 0;
      for (int64_t len : p) {
        double sq = 0, dot = 0, l1 = 0, s = 0;
        for (std::size_t k = at; k < at + static_cast<std::size_t>(len); ++k) {
          const auto [y, sj] = Clipped(x, k, p, setting.clip);
          sq += double{x[k]} * x[k];
          dot += y * std::fabs(x[k]);
          l1 += y;
          s = sj;
        }
        closed += sq - (l1 > 0 ? dot * dot / (s * l1) : 0);
        const double m = static_cast<double>(len);
        const double first = setting.clip > 0 ? std::min(1.0, setting.clip * setting.clip / m) : 1;
        delta = std::min(delta, first * 2 / (1 + std::sqrt(m)));
        at += static_cast<std::size_t>(len);
      }
    }
    Rng rng(DeriveSeed(44, setting.name));
    double measured = 0;
    for (int d = 0; d < kDraws; ++d) {
      const std::vector<float> back = RoundTrip(*c, x, rng, nullptr, setting.pieces);
      for (std::size_t i = 0; i < kN; ++i) measured += (back[i] - double{x[i]}) * (back[i] - x[i]);
    }
    measured /= kDraws;
    EXPECT_NEAR(measured, closed, 0.03 * closed);
    EXPECT_LE(closed, (1 - delta) * norm2) << "delta " << delta;
  }
}

// Buckets are what let qsgd run at few levels: at s = 15 on 100 000 elements one norm
// leaves a variance of up to sqrt(n) / s ~ 21 times ||x||^2, about 16 times on a Gaussian
// vector; buckets of 512 at most sqrt(512) / 15 ~ 1.5 times (Alistarh et al. 2017, Lemma
// 3.1), about 0.4 times here.
TEST(Qsgd, BucketsBoundTheVariance) {
  constexpr std::size_t kN = 100000;
  const std::vector<float> x = RandomVector(kN, 8);
  double norm2 = 0;
  for (float v : x) norm2 += double{v} * v;
  // sum_b (||x_b|| / s)^2 sum_{i in b} f_i (1 - f_i), as Variance has it per element.
  auto relative_variance = [&](int64_t bucket) {
    const auto d = static_cast<std::size_t>(std::min<int64_t>(bucket, kN));
    double v = 0;
    for (std::size_t b = 0; b * d < kN; ++b) {
      double sq = 0;
      for (std::size_t i = b * d; i < std::min(kN, (b + 1) * d); ++i) sq += double{x[i]} * x[i];
      const double step = std::sqrt(sq) / 15;
      for (std::size_t i = b * d; i < std::min(kN, (b + 1) * d); ++i) {
        const double r = std::fabs(x[i]) / step;
        v += step * step * (r - std::floor(r)) * (1 - (r - std::floor(r)));
      }
    }
    return v / norm2;
  };
  const double bucketed = relative_variance(512), whole = relative_variance(kMaxQsgdBucket);
  EXPECT_LE(bucketed, std::sqrt(512.0) / 15);
  EXPECT_LE(whole, std::sqrt(double{kN}) / 15);
  EXPECT_GT(whole, 20 * bucketed);
}

// terngrad's wire: the piece table (a count and a scale per piece) and 2 bits per element.
TEST(TernGrad, BytesAreThePieceTableAndTheCodes) {
  Rng rng(1);
  const std::vector<float> x = RandomVector(1000, 2);
  for (const std::vector<int64_t>& pieces :
       {std::vector<int64_t>{}, {1000}, {500, 500}, {1, 998, 1}, std::vector<int64_t>(1000, 1)}) {
    Encoded e;
    Make("terngrad")->Encode(x, rng, &e, pieces);
    const std::size_t m = std::max<std::size_t>(1, pieces.size());
    EXPECT_EQ(e.frames[0].size(), 4 + 8 * m);
    EXPECT_EQ(e.bytes(), static_cast<int64_t>(4 + 8 * m + 2000 / 64 * 8 + 8)) << m;
    uint32_t count;
    std::memcpy(&count, e.frames[0].data(), 4);
    EXPECT_EQ(count, m);
  }
}

// Each piece has its own scale: a piece of small values next to one of large values keeps
// its own magnitude instead of the largest of the whole part.
TEST(TernGrad, EachPieceHasItsOwnScale) {
  std::vector<float> x(200);
  for (std::size_t i = 0; i < 100; ++i) x[i] = (i % 2 ? 1 : -1) * 0.001f;
  for (std::size_t i = 100; i < 200; ++i) x[i] = (i % 2 ? 1 : -1) * 10.0f;
  Rng rng(1);
  const std::vector<float> back = RoundTrip(*Make("terngrad", 0.25, 15, 512, 0), x, rng, nullptr,
                                            std::vector<int64_t>{100, 100});
  for (std::size_t i = 0; i < 100; ++i) EXPECT_EQ(std::fabs(back[i]), 0.001f) << i;
  for (std::size_t i = 100; i < 200; ++i) EXPECT_EQ(std::fabs(back[i]), 10.0f) << i;
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

  // qsgd at s = 15 in buckets of 512: one norm for 100 elements; and in buckets of 30,
  // four.
  Encoded q = encode("qsgd");
  ASSERT_EQ(q.frames[0].size(), 12u);
  bad = q;
  set32(bad, 0, 8, std::nanf(""));
  EXPECT_TRUE(refused(bad));
  bad = q;
  set32(bad, 0, 8, -1.0f);
  EXPECT_TRUE(refused(bad));
  bad = q;
  set32(bad, 0, 0, uint32_t{0});  // s = 0
  EXPECT_TRUE(refused(bad));
  bad = q;
  set32(bad, 0, 0, uint32_t{16});  // s = 16 needs 6-bit codes, the frame has 5-bit ones
  EXPECT_TRUE(refused(bad));
  bad = q;
  set32(bad, 0, 4, uint32_t{0});  // d = 0
  EXPECT_TRUE(refused(bad));
  bad = q;
  set32(bad, 0, 4, uint32_t{50});  // d = 50: two norms expected, one sent
  EXPECT_TRUE(refused(bad));
  bad = q;
  set32(bad, 0, 4, uint32_t{100});  // d = 100 or more: the same single bucket
  EXPECT_FALSE(refused(bad));
  bad = q;
  bad.frames[0].resize(8);  // no norm
  EXPECT_TRUE(refused(bad));
  bad = q;
  bad.frames[0].resize(4);  // not even d
  EXPECT_TRUE(refused(bad));
  bad = q;
  bad.frames[0].clear();
  EXPECT_TRUE(refused(bad));
  bad = q;
  bad.frames[0].resize(16);  // a norm too many
  EXPECT_TRUE(refused(bad));
  bad = q;
  bad.frames[1][0] = std::byte{0x1f};  // first code: level 15, negative: fine
  EXPECT_FALSE(refused(bad));
  set32(bad, 0, 0, uint32_t{14});  // level 15 > s = 14 (14 also needs 5 bits)
  EXPECT_TRUE(refused(bad));
  bad = q;
  bad.frames[1][0] = (bad.frames[1][0] & std::byte{0xe0}) | std::byte{0x01};  // sign on level 0
  EXPECT_TRUE(refused(bad));
  bad = q;
  bad.frames[1].back() |= std::byte{0x80};  // 500 bits in 8 words: padding
  EXPECT_TRUE(refused(bad));
  Encoded q30;
  Make("qsgd", 0.25, 15, 30)->Encode(x, rng, &q30);
  ASSERT_EQ(q30.frames[0].size(), 8u + 4 * 4);
  EXPECT_FALSE(refused(q30));
  for (std::size_t b = 0; b < 4; ++b) {  // a bad norm in any bucket
    for (float v : {std::nanf(""), -0.5f, std::numeric_limits<float>::infinity()}) {
      bad = q30;
      set32(bad, 0, 8 + 4 * b, v);
      EXPECT_TRUE(refused(bad)) << "bucket " << b << " norm " << v;
    }
  }

  Encoded s = encode("sign");
  bad = s;
  set32(bad, 0, 0, std::numeric_limits<float>::infinity());
  EXPECT_TRUE(refused(bad));
  bad = s;
  bad.frames[1].back() |= std::byte{0x80};  // 100 bits in 2 words: padding
  EXPECT_TRUE(refused(bad));

  // terngrad in pieces (40, 1, 59): m = 3, the counts at 4, 8, 12, the scales at 16, 20, 24.
  Encoded t;
  Make("terngrad")->Encode(x, rng, &t, std::vector<int64_t>{40, 1, 59});
  ASSERT_EQ(t.frames[0].size(), 4u + 8 * 3);
  EXPECT_FALSE(refused(t));
  bad = t;
  bad.frames[1][0] |= std::byte{0x03};  // code 3
  EXPECT_TRUE(refused(bad));
  bad = t;
  bad.frames[1].back() |= std::byte{0x80};  // 200 bits in 4 words: padding
  EXPECT_TRUE(refused(bad));
  for (uint32_t m : {0u, 2u, 4u, 101u, 0xffffffffu}) {  // a count of pieces the table is not
    bad = t;
    set32(bad, 0, 0, m);
    EXPECT_TRUE(refused(bad)) << m << " pieces";
  }
  for (auto [at, count] : {std::pair{4, 0u},
                           {4, 41u},
                           {4, 39u},
                           {8, 0u},
                           {12, 60u},
                           {12, 58u},
                           {4, 0xffffffffu}}) {  // counts that do not cover the 100 elements
    bad = t;
    set32(bad, 0, static_cast<std::size_t>(at), count);
    EXPECT_TRUE(refused(bad)) << "count " << count << " at " << at;
  }
  bad = t;  // the counts may move as long as they cover the vector
  set32(bad, 0, 4, 41u);
  set32(bad, 0, 12, 58u);
  EXPECT_FALSE(refused(bad));
  for (std::size_t j = 0; j < 3; ++j) {  // a bad scale of any piece
    for (float v : {std::nanf(""), -1.0f, std::numeric_limits<float>::infinity()}) {
      bad = t;
      set32(bad, 0, 16 + 4 * j, v);
      EXPECT_TRUE(refused(bad)) << "piece " << j << " scale " << v;
    }
  }
  for (std::size_t size : {0u, 3u, 4u, 27u, 29u}) {
    bad = t;
    bad.frames[0].resize(size);
    EXPECT_TRUE(refused(bad)) << size << " bytes";
  }
}

}  // namespace
}  // namespace asgd::compression
