// The stochastic compressors against their definitions, measured over seeded draws:
// unbiasedness (qsgd, randk, terngrad without clipping), terngrad's clipped mean, the
// error-feedback forms as contractions (in mean and in their closed-form error), and the
// variance qsgd's buckets bound (docs/compression.md).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "compression/compressor.h"
#include "compression/error_feedback.h"
#include "core/rng.h"
#include "tests/compression/compressor_testing.h"

namespace asgd::compression {
namespace {

using testing::kCompressors;
using testing::Make;
using testing::RandomVector;
using testing::RoundTrip;

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

}  // namespace
}  // namespace asgd::compression
