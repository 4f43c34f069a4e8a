// Gradient checks of every layer kernel, in double against central differences.
#include "models/layers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/models/test_data.h"

namespace asgd::models {
namespace {

using layers::ConstMatMap;
using layers::MatMap;
using testing::NumericalGradient;
using testing::RandomVector;
using testing::RelativeError;

// Central differences in double with eps 1e-6 are accurate to ~1e-9 relative on these
// smooth-almost-everywhere functions; a wrong gradient is off by O(1).
constexpr double kEps = 1e-6;
constexpr double kTolerance = 1e-6;

std::string ActName(std::optional<Activation> a) {
  return a ? std::string(ActivationName(*a)) : "identity";
}

const std::optional<Activation> kActivations[] = {std::nullopt, Activation::kRelu,
                                                  Activation::kTanh, Activation::kSigmoid};

// ---- Dense ---------------------------------------------------------------------------

class DenseLayerTest : public ::testing::TestWithParam<std::optional<Activation>> {};

TEST_P(DenseLayerTest, GradientMatchesFiniteDifferences) {
  const std::optional<Activation> act = GetParam();
  const int64_t rows = 3, in = 4, out = 5;
  const int64_t nx = rows * in, nw = in * out, nb = out;
  // theta = [x, w, b]; loss = Σ r ⊙ act(x·w + b) for a fixed random r.
  const std::vector<double> theta = RandomVector(static_cast<std::size_t>(nx + nw + nb), 1);
  const std::vector<double> r = RandomVector(static_cast<std::size_t>(rows * out), 2);
  std::vector<double> y(static_cast<std::size_t>(rows * out));
  auto forward = [&](std::span<const double> t) {
    layers::DenseForward<double>(ConstMatMap<double>(t.data(), rows, in),
                                 ConstMatMap<double>(t.data() + nx, in, out), t.data() + nx + nw,
                                 act, MatMap<double>(y.data(), rows, out));
    double loss = 0;
    for (std::size_t i = 0; i < y.size(); ++i) loss += r[i] * y[i];
    return loss;
  };
  forward(theta);
  std::vector<double> grad(theta.size());
  std::vector<double> dy = r;
  layers::DenseActivationBackward<double>(act, ConstMatMap<double>(y.data(), rows, out),
                                          MatMap<double>(dy.data(), rows, out),
                                          grad.data() + nx + nw);
  layers::DenseBackward<double>(ConstMatMap<double>(theta.data(), rows, in),
                                ConstMatMap<double>(theta.data() + nx, in, out),
                                ConstMatMap<double>(dy.data(), rows, out),
                                MatMap<double>(grad.data() + nx, in, out), grad.data());
  const std::vector<double> numeric = NumericalGradient(forward, theta, kEps);
  auto range = [](int64_t begin, int64_t n) {
    std::vector<int64_t> c;
    for (int64_t i = 0; i < n; ++i) c.push_back(begin + i);
    return c;
  };
  EXPECT_LT(RelativeError(grad, numeric, range(0, nx)), kTolerance) << "dx";
  EXPECT_LT(RelativeError(grad, numeric, range(nx, nw)), kTolerance) << "dw";
  EXPECT_LT(RelativeError(grad, numeric, range(nx + nw, nb)), kTolerance) << "db";
}

INSTANTIATE_TEST_SUITE_P(Activations, DenseLayerTest, ::testing::ValuesIn(kActivations),
                         [](const auto& p) { return ActName(p.param); });

TEST(DenseLayer, ForwardIsXWPlusBThenActivation) {
  const std::vector<double> x = {1, 2, 3, 4};            // [2, 2]
  const std::vector<double> w = {1, -1, 0.5, 2, 0, -3};  // [2, 3]
  const std::vector<double> b = {0.5, 0, -1};
  std::vector<double> y(6);
  layers::DenseForward<double>(ConstMatMap<double>(x.data(), 2, 2),
                               ConstMatMap<double>(w.data(), 2, 3), b.data(), Activation::kRelu,
                               MatMap<double>(y.data(), 2, 3));
  // Row 0: [1+4+0.5, -1+0+0, 0.5-6-1] = [5.5, -1, -6.5] → relu [5.5, 0, 0].
  EXPECT_DOUBLE_EQ(y[0], 5.5);
  EXPECT_DOUBLE_EQ(y[1], 0.0);
  EXPECT_DOUBLE_EQ(y[2], 0.0);
  // Row 1: [3+8+0.5, -3, 1.5-12-1] → [11.5, 0, 0].
  EXPECT_DOUBLE_EQ(y[3], 11.5);
}

// The float kernels use Eigen's vectorised tanh and logistic; they must agree with the
// double reference to float precision.
TEST(Activations, FloatMatchesDouble) {
  for (Activation a : {Activation::kRelu, Activation::kTanh, Activation::kSigmoid}) {
    const std::vector<double> z = RandomVector(1000, 3, 4.0);
    std::vector<float> yf(z.begin(), z.end());
    std::vector<double> yd(z.begin(), z.end());
    const std::vector<float> bf(1000, 0.0f);
    const std::vector<double> bd(1000, 0.0);
    layers::BiasActivate<float>(a, bf.data(), yf.data(), 1000);
    layers::BiasActivate<double>(a, bd.data(), yd.data(), 1000);
    for (std::size_t i = 0; i < z.size(); ++i) {
      ASSERT_NEAR(yf[i], yd[i], 2e-6) << ActivationName(a) << " at " << z[i];
    }
  }
}

// ---- Softmax cross-entropy ---------------------------------------------------------------

TEST(SoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  const int64_t rows = 4, classes = 5;
  const std::vector<double> z = RandomVector(static_cast<std::size_t>(rows * classes), 4, 3.0);
  const int32_t labels[] = {0, 4, 2, 2};
  auto loss = [&](std::span<const double> logits) {
    EvalResult r;
    layers::SoftmaxCrossEntropy<double>(logits.data(), labels, rows, classes, 1.0 / rows,
                                        nullptr, &r);
    return r.loss_sum / rows;
  };
  std::vector<double> dz(z.size());
  EvalResult r;
  layers::SoftmaxCrossEntropy<double>(z.data(), labels, rows, classes, 1.0 / rows, dz.data(),
                                      &r);
  EXPECT_EQ(r.count, rows);
  EXPECT_LT(RelativeError(dz, NumericalGradient(loss, z, kEps)), kTolerance);

  // Against the textbook formula −log softmax(z)[label], and argmax accuracy.
  double expected = 0;
  int64_t correct = 0;
  for (int64_t i = 0; i < rows; ++i) {
    double sum = 0;
    int64_t best = 0;
    for (int64_t c = 0; c < classes; ++c) {
      sum += std::exp(z[static_cast<std::size_t>(i * classes + c)]);
      if (z[static_cast<std::size_t>(i * classes + c)] >
          z[static_cast<std::size_t>(i * classes + best)]) {
        best = c;
      }
    }
    expected -= std::log(std::exp(z[static_cast<std::size_t>(i * classes + labels[i])]) / sum);
    correct += best == labels[i];
  }
  EXPECT_NEAR(r.loss_sum, expected, 1e-12);
  EXPECT_EQ(r.correct, correct);
}

TEST(SoftmaxCrossEntropy, StableForHugeLogits) {
  const float z[] = {1000.0f, -1000.0f, 999.0f, 0.0f, 88.0f, 89.0f};
  const int32_t labels[] = {2, 0};
  float dz[6];
  EvalResult r;
  layers::SoftmaxCrossEntropy<float>(z, labels, 2, 3, 0.5f, dz, &r);
  // Row 0 (label 2): 1 + log(1 + e⁻¹); row 1 (label 0): 89 + log(1 + e⁻¹ + e⁻⁸⁹).
  EXPECT_NEAR(r.loss_sum, 90.0 + 2 * std::log1p(std::exp(-1.0)), 1e-4);
  EXPECT_EQ(r.correct, 0);
  for (float d : dz) EXPECT_TRUE(std::isfinite(d));
  EXPECT_NEAR(dz[0] + dz[1] + dz[2], 0.0f, 1e-6f);
}

TEST(SoftmaxCrossEntropy, RejectsLabelOutOfRange) {
  const float z[] = {0, 0};
  const int32_t labels[] = {2};
  EvalResult r;
  EXPECT_THROW(layers::SoftmaxCrossEntropy<float>(z, labels, 1, 2, 1.0f, nullptr, &r),
               InvariantError);
}

// ---- Convolution via im2col ------------------------------------------------------------------

struct ConvCase {
  int64_t pad;
  std::optional<Activation> act;
};

class ConvLayerTest : public ::testing::TestWithParam<ConvCase> {
 protected:
  // 2 examples of 2 × 5 × 6, 3 output channels, 3 × 3 kernel.
  ConvBlockShape Shape() const {
    ConvBlockShape s{};
    s.in_channels = 2;
    s.in_height = 5;
    s.in_width = 6;
    s.out_channels = 3;
    s.kernel = 3;
    s.pad = GetParam().pad;
    s.conv_height = s.in_height + 2 * s.pad - 2;
    s.conv_width = s.in_width + 2 * s.pad - 2;
    s.pool_height = s.conv_height / 2;
    s.pool_width = s.conv_width / 2;
    return s;
  }
  static constexpr int64_t kBatch = 2;
};

TEST_P(ConvLayerTest, ForwardMatchesDirectCrossCorrelation) {
  const ConvBlockShape s = Shape();
  const int64_t hw = s.in_height * s.in_width, ohw = s.conv_height * s.conv_width;
  const int64_t k = s.in_channels * s.kernel * s.kernel;
  const std::vector<double> x = RandomVector(static_cast<std::size_t>(kBatch * s.in_channels * hw), 5);
  const std::vector<double> w = RandomVector(static_cast<std::size_t>(s.out_channels * k), 6);
  const std::vector<double> b = RandomVector(static_cast<std::size_t>(s.out_channels), 7);
  std::vector<double> cols(static_cast<std::size_t>(k * kBatch * ohw));
  std::vector<double> out(static_cast<std::size_t>(s.out_channels * kBatch * ohw));
  layers::Im2Col<double, double>(x.data(), kBatch, hw, s.in_channels * hw, s, cols.data());
  layers::ConvForward<double>(ConstMatMap<double>(w.data(), s.out_channels, k), b.data(),
                              ConstMatMap<double>(cols.data(), k, kBatch * ohw), std::nullopt,
                              MatMap<double>(out.data(), s.out_channels, kBatch * ohw));
  for (int64_t o = 0; o < s.out_channels; ++o) {
    for (int64_t n = 0; n < kBatch; ++n) {
      for (int64_t i = 0; i < s.conv_height; ++i) {
        for (int64_t j = 0; j < s.conv_width; ++j) {
          double expected = b[static_cast<std::size_t>(o)];
          for (int64_t c = 0; c < s.in_channels; ++c) {
            for (int64_t u = 0; u < s.kernel; ++u) {
              for (int64_t v = 0; v < s.kernel; ++v) {
                const int64_t ii = i + u - s.pad, jj = j + v - s.pad;
                if (ii < 0 || ii >= s.in_height || jj < 0 || jj >= s.in_width) continue;
                expected += w[static_cast<std::size_t>(((o * s.in_channels + c) * s.kernel + u) *
                                                           s.kernel + v)] *
                            x[static_cast<std::size_t>((n * s.in_channels + c) * hw +
                                                       ii * s.in_width + jj)];
              }
            }
          }
          // Output is CNHW.
          EXPECT_NEAR(out[static_cast<std::size_t>((o * kBatch + n) * ohw + i * s.conv_width + j)],
                      expected, 1e-12);
        }
      }
    }
  }
}

TEST_P(ConvLayerTest, GradientMatchesFiniteDifferences) {
  const ConvBlockShape s = Shape();
  const std::optional<Activation> act = GetParam().act;
  const int64_t hw = s.in_height * s.in_width, ohw = s.conv_height * s.conv_width;
  const int64_t k = s.in_channels * s.kernel * s.kernel;
  const int64_t nx = kBatch * s.in_channels * hw, nw = s.out_channels * k, nb = s.out_channels;
  const int64_t n = kBatch * ohw;
  const std::vector<double> theta = RandomVector(static_cast<std::size_t>(nx + nw + nb), 8);
  const std::vector<double> r = RandomVector(static_cast<std::size_t>(s.out_channels * n), 9);
  std::vector<double> cols(static_cast<std::size_t>(k * n));
  std::vector<double> out(static_cast<std::size_t>(s.out_channels * n));
  // theta = [x (NCHW), w, b]; loss = Σ r ⊙ act(conv(x)).
  auto forward = [&](std::span<const double> t) {
    layers::Im2Col<double, double>(t.data(), kBatch, hw, s.in_channels * hw, s, cols.data());
    layers::ConvForward<double>(ConstMatMap<double>(t.data() + nx, s.out_channels, k),
                                t.data() + nx + nw, ConstMatMap<double>(cols.data(), k, n), act,
                                MatMap<double>(out.data(), s.out_channels, n));
    double loss = 0;
    for (std::size_t i = 0; i < out.size(); ++i) loss += r[i] * out[i];
    return loss;
  };
  forward(theta);
  std::vector<double> grad(theta.size());
  std::vector<double> dout = r;
  std::vector<double> dcols(cols.size());
  layers::ConvBackward<double>(act, ConstMatMap<double>(out.data(), s.out_channels, n),
                               MatMap<double>(dout.data(), s.out_channels, n),
                               ConstMatMap<double>(theta.data() + nx, s.out_channels, k),
                               ConstMatMap<double>(cols.data(), k, n),
                               MatMap<double>(grad.data() + nx, s.out_channels, k),
                               grad.data() + nx + nw, dcols.data());
  layers::Col2Im<double>(dcols.data(), kBatch, hw, s.in_channels * hw, s, grad.data());
  const std::vector<double> numeric = NumericalGradient(forward, theta, kEps);
  auto range = [](int64_t begin, int64_t count) {
    std::vector<int64_t> c;
    for (int64_t i = 0; i < count; ++i) c.push_back(begin + i);
    return c;
  };
  EXPECT_LT(RelativeError(grad, numeric, range(0, nx)), kTolerance) << "dx (col2im)";
  EXPECT_LT(RelativeError(grad, numeric, range(nx, nw)), kTolerance) << "dw";
  EXPECT_LT(RelativeError(grad, numeric, range(nx + nw, nb)), kTolerance) << "db";
}

INSTANTIATE_TEST_SUITE_P(
    PadsAndActivations, ConvLayerTest,
    ::testing::Values(ConvCase{0, std::nullopt}, ConvCase{1, std::nullopt},
                      ConvCase{1, Activation::kRelu}, ConvCase{0, Activation::kTanh},
                      ConvCase{1, Activation::kSigmoid}),
    [](const auto& p) {
      return "pad" + std::to_string(p.param.pad) + "_" + ActName(p.param.act);
    });

// ---- Max-pooling -------------------------------------------------------------------------------

TEST(MaxPool, GradientMatchesFiniteDifferences) {
  // Odd sizes: the last row and column are dropped.
  const int64_t planes = 3, h = 5, w = 7, ph = 2, pw = 3;
  const std::vector<double> x = RandomVector(static_cast<std::size_t>(planes * h * w), 10);
  const std::vector<double> r = RandomVector(static_cast<std::size_t>(planes * ph * pw), 11);
  std::vector<double> out(r.size());
  std::vector<int32_t> argmax(r.size());
  auto forward = [&](std::span<const double> t) {
    layers::MaxPoolForward<double>(t.data(), planes, h, w, out.data(), argmax.data());
    double loss = 0;
    for (std::size_t i = 0; i < out.size(); ++i) loss += r[i] * out[i];
    return loss;
  };
  forward(x);
  std::vector<double> dx(x.size(), 99.0);  // overwritten entirely
  layers::MaxPoolBackward<double>(r.data(), argmax.data(), planes, h, w, dx.data());
  const std::vector<double> numeric = NumericalGradient(forward, x, kEps);
  EXPECT_LT(RelativeError(dx, numeric), kTolerance);
  // The dropped last column and row get no gradient.
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t i = 0; i < h; ++i) EXPECT_EQ(dx[static_cast<std::size_t>(p * h * w + i * w + 6)], 0.0);
    for (int64_t j = 0; j < w; ++j) EXPECT_EQ(dx[static_cast<std::size_t>(p * h * w + 4 * w + j)], 0.0);
  }
}

TEST(MaxPool, TiesGoToTheFirstMaximumInRowMajorOrder) {
  // One 2 × 4 plane: windows [1 3; 3 2] and [5 5; 5 5].
  const float x[] = {1, 3, 5, 5, 3, 2, 5, 5};
  float out[2];
  int32_t argmax[2];
  layers::MaxPoolForward<float>(x, 1, 2, 4, out, argmax);
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_EQ(argmax[0], 1);
  EXPECT_EQ(out[1], 5.0f);
  EXPECT_EQ(argmax[1], 2);
}

// ---- Sparse logistic regression -----------------------------------------------------------------

TEST(BinaryCrossEntropy, GradientMatchesFiniteDifferencesAndIsStable) {
  const std::vector<double> z = {-3.0, -0.2, 0.0, 0.7, 5.0, 40.0};
  const int32_t labels[] = {0, 1, 1, 0, 1, 0};
  const auto rows = static_cast<int64_t>(z.size());
  auto loss = [&](std::span<const double> t) {
    EvalResult r;
    layers::BinaryCrossEntropy<double>(t.data(), labels, rows, 1.0 / rows, nullptr, &r);
    return r.loss_sum / rows;
  };
  std::vector<double> dz(z.size());
  EvalResult r;
  layers::BinaryCrossEntropy<double>(z.data(), labels, rows, 1.0 / rows, dz.data(), &r);
  EXPECT_LT(RelativeError(dz, NumericalGradient(loss, z, kEps)), kTolerance);
  // loss = −y log σ(z) − (1 − y) log(1 − σ(z)); z = 40 with label 0 costs ≈ 40.
  double expected = 0;
  for (std::size_t i = 0; i < z.size(); ++i) {
    // −log σ(z) = log(1 + e^−z); −log(1 − σ(z)) = log(1 + e^z).
    expected += std::log1p(std::exp(labels[i] ? -z[i] : z[i]));
  }
  EXPECT_NEAR(r.loss_sum, expected, 1e-9);
  EXPECT_EQ(r.correct, 2);  // z = −3 (label 0) and z = 5 (label 1); z = 0 predicts 0.

  const float big[] = {-200.0f, 200.0f};
  const int32_t big_labels[] = {1, 0};
  float dbig[2];
  EvalResult rb;
  layers::BinaryCrossEntropy<float>(big, big_labels, 2, 1.0f, dbig, &rb);
  EXPECT_NEAR(rb.loss_sum, 400.0, 1e-3);
  EXPECT_FLOAT_EQ(dbig[0], -1.0f);
  EXPECT_FLOAT_EQ(dbig[1], 1.0f);
}

TEST(SparseLogits, MatchesDenseDotProducts) {
  const testing::SparseData d = testing::MakeSparse(6, 10, 4, 12, /*random_values=*/true);
  const std::vector<double> w = RandomVector(10, 13);
  std::vector<double> z(6);
  // A view of rows 2..5 keeps the absolute indptr offsets.
  const datasets::BatchView view = d.View(2, 4);
  layers::SparseLogits<double>(view, w.data(), 0.5, 10, z.data());
  for (int64_t r = 0; r < 4; ++r) {
    double expected = 0.5;
    for (int64_t k = d.indptr[static_cast<std::size_t>(2 + r)];
         k < d.indptr[static_cast<std::size_t>(3 + r)]; ++k) {
      expected += w[static_cast<std::size_t>(d.indices[static_cast<std::size_t>(k)])] *
                  d.values[static_cast<std::size_t>(k)];
    }
    EXPECT_NEAR(z[static_cast<std::size_t>(r)], expected, 1e-12);
  }
  std::vector<float> wf(5, 0.0f);
  std::vector<float> zf(4);
  EXPECT_THROW(layers::SparseLogits<float>(view, wf.data(), 0.0f, 5, zf.data()), InvariantError);
}

}  // namespace
}  // namespace asgd::models
