// The CUDA kernels and the row-major cuBLAS wrapper, each against the CPU layer it
// replaces (models/layers.h) on the same inputs, plus the error macro (which needs no
// device). Tolerances, and why:
//   * data movement (im2col, pooling and its argmax, CNHW transposes): exact;
//   * col2im: 4 ulp (EXPECT_FLOAT_EQ), although the GPU adds in the CPU's order;
//   * bias + relu/identity: exact (one float add); tanh and sigmoid: 2e-6 absolute (the
//     CUDA and Eigen functions are each within a few ulp of the true value, outputs lie
//     in [−1, 1]); activation backward: 1e-6·(1 + |dy|) (nvcc may fuse 1 − y² into an
//     FMA, which rounds once instead of twice);
//   * bias gradients (double accumulation): 1e-6 of Σ|terms| from the exact sum;
//   * softmax cross-entropy: loss sum 1e-5 relative, probabilities 4e-6 (expf/logf are
//     within 2 ulp on both sides), correct counts exact;
//   * GEMMs: |error| ≤ 1e-5 · Σ_k |a_ik·b_kj| against double, about 3× the worst-case
//     float bound k·eps for k = 53, and 100× below what TF32 would give.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "models/architecture.h"
#include "models/cuda/cuda_check.h"
#include "models/cuda/device_memory.h"
#include "models/cuda/factory.h"
#include "models/cuda/gemm.h"
#include "models/cuda/kernels.h"
#include "models/layers.h"
#include "tests/models/cuda_test_util.h"

namespace asgd::models::cuda {
namespace {

using cuda::testing::CudaTest;
using cuda::testing::Poisoned;
using cuda::testing::ToDevice;
using cuda::testing::ToHost;

std::vector<float> RandomFloats(int64_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = static_cast<float>(scale * rng.Normal());
  return v;
}

std::optional<Activation> ToCpu(KernelActivation act) {
  switch (act) {
    case KernelActivation::kIdentity:
      return std::nullopt;
    case KernelActivation::kRelu:
      return Activation::kRelu;
    case KernelActivation::kTanh:
      return Activation::kTanh;
    case KernelActivation::kSigmoid:
      return Activation::kSigmoid;
  }
  return std::nullopt;
}

std::string ActName(KernelActivation act) {
  const std::optional<Activation> a = ToCpu(act);
  return a ? std::string(ActivationName(*a)) : std::string("identity");
}

// ---- Without a device --------------------------------------------------------------------

TEST(CudaCheck, ErrorNamesTheCallFileLineAndDevice) {
  // cudaSetDevice(-1) fails everywhere: invalid device with a driver, no driver without.
  const int line = __LINE__ + 2;
  try {
    ASGD_CUDA_CHECK(cudaSetDevice(-1));
    ADD_FAILURE() << "no DeviceError";
  } catch (const DeviceError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("cuda: cudaSetDevice(-1) failed: cuda", 0), 0u) << what;
    EXPECT_NE(what.find(" at tests/models/cuda_layers_test.cc:" + std::to_string(line) +
                        " on device "),
              std::string::npos)
        << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(CudaCheck, CublasStatusesBecomeDeviceErrors) {
  try {
    ASGD_CUDA_CHECK(CUBLAS_STATUS_INVALID_VALUE);
    ADD_FAILURE() << "no DeviceError";
  } catch (const DeviceError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("CUBLAS_STATUS_INVALID_VALUE failed: CUBLAS_STATUS_INVALID_VALUE ("),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("tests/models/cuda_layers_test.cc:"), std::string::npos) << what;
  }
  // Success is silent, and the call is evaluated once.
  int calls = 0;
  ASGD_CUDA_CHECK((++calls, cudaSuccess));
  ASGD_CUDA_CHECK((++calls, CUBLAS_STATUS_SUCCESS));
  EXPECT_EQ(calls, 2);
}

TEST(CudaDevices, CountAndReasonAgree) {
  const int count = DeviceCount();
  RecordProperty("cuda_device_count", count);
  EXPECT_EQ(count, CudaDeviceCount());
  EXPECT_EQ(UnavailableReason(), CudaUnavailableReason());
  EXPECT_EQ(count == 0, !UnavailableReason().empty()) << UnavailableReason();
  EXPECT_THROW(DeviceDescription(count), DeviceError);
  if (count > 0) RecordProperty("cuda_device_0", DeviceDescription(0));
}

TEST(CudaDevices, ModelsOnAMissingDeviceThrowDeviceError) {
  MlpArchitecture arch;
  arch.inputs = 4;
  arch.hidden = {3};
  arch.classes = 2;
  for (int device : {DeviceCount(), -1}) {
    try {
      NewCudaMlpModel(arch, device);
      ADD_FAILURE() << "no DeviceError for device " << device;
    } catch (const DeviceError& e) {
      EXPECT_EQ(e.device(), device);
      const std::string what = e.what();
      EXPECT_NE(what.find("cuda:" + std::to_string(device)), std::string::npos) << what;
      if (DeviceCount() == 0) {
        EXPECT_NE(what.find(UnavailableReason()), std::string::npos) << what;
      }
    }
  }
  EXPECT_THROW(NewCudaCnnModel(CnnArchitecture{}, DeviceCount()), DeviceError);
}

// ---- Bias and activations ----------------------------------------------------------------

class CudaActivationTest : public CudaTest,
                           public ::testing::WithParamInterface<KernelActivation> {};

TEST_P(CudaActivationTest, DenseBiasActivateMatchesCpu) {
  const KernelActivation act = GetParam();
  const int64_t rows = 13, out = 37;
  const std::vector<float> y = RandomFloats(rows * out, 1, 2.0);
  const std::vector<float> b = RandomFloats(out, 2);
  std::vector<float> expected = y;
  for (int64_t r = 0; r < rows; ++r) {
    layers::BiasActivate<float>(ToCpu(act), b.data(), expected.data() + r * out, out);
  }
  auto d_y = ToDevice(y);
  auto d_b = ToDevice(b);
  LaunchBiasActivate(d_y.get(), rows * out, d_b.get(), 1, out, act, stream());
  Sync();
  const std::vector<float> got = ToHost(d_y);
  const bool exact = act == KernelActivation::kIdentity || act == KernelActivation::kRelu;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (exact) {
      ASSERT_EQ(got[i], expected[i]) << i;
    } else {
      ASSERT_NEAR(got[i], expected[i], 2e-6) << i;
    }
  }
}

TEST_P(CudaActivationTest, ChannelBiasActivateMatchesCpu) {
  const KernelActivation act = GetParam();
  const int64_t channels = 5, n = 301;
  const std::vector<float> y = RandomFloats(channels * n, 3, 2.0);
  const std::vector<float> b = RandomFloats(channels, 4);
  std::vector<float> expected = y;
  for (int64_t c = 0; c < channels; ++c) {
    layers::ScalarBiasActivate<float>(ToCpu(act), b[static_cast<std::size_t>(c)],
                                      expected.data() + c * n, n);
  }
  auto d_y = ToDevice(y);
  auto d_b = ToDevice(b);
  LaunchBiasActivate(d_y.get(), channels * n, d_b.get(), n, channels, act, stream());
  Sync();
  const std::vector<float> got = ToHost(d_y);
  const bool exact = act == KernelActivation::kIdentity || act == KernelActivation::kRelu;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (exact) {
      ASSERT_EQ(got[i], expected[i]) << i;
    } else {
      ASSERT_NEAR(got[i], expected[i], 2e-6) << i;
    }
  }
}

TEST_P(CudaActivationTest, BackwardMatchesCpu) {
  const KernelActivation act = GetParam();
  if (act == KernelActivation::kIdentity) GTEST_SKIP() << "identity has no backward kernel";
  const int64_t n = 1001;
  // Outputs of the activation: relu ≥ 0 with exact zeros, tanh in (−1, 1), sigmoid in (0, 1).
  std::vector<float> y = RandomFloats(n, 5, 2.0);
  layers::ScalarBiasActivate<float>(ToCpu(act), 0.0f, y.data(), n);
  const std::vector<float> dy = RandomFloats(n, 6);
  std::vector<float> expected = dy;
  layers::ActivationBackward<float>(*ToCpu(act), y.data(), expected.data(), n);
  auto d_y = ToDevice(y);
  auto d_dy = ToDevice(dy);
  LaunchActivationBackward(d_y.get(), d_dy.get(), n, act, stream());
  Sync();
  const std::vector<float> got = ToHost(d_dy);
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (act == KernelActivation::kRelu) {
      ASSERT_EQ(got[i], expected[i]) << i;
    } else {
      ASSERT_NEAR(got[i], expected[i], 1e-6 * (1 + std::abs(dy[i]))) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Activations, CudaActivationTest,
                         ::testing::Values(KernelActivation::kIdentity, KernelActivation::kRelu,
                                           KernelActivation::kTanh, KernelActivation::kSigmoid),
                         [](const auto& p) { return ActName(p.param); });

// ---- Bias gradients ----------------------------------------------------------------------

using CudaLayerTest = CudaTest;

TEST_F(CudaLayerTest, ColumnSumsAreExactSumsRounded) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {300, 37}, {2048, 1024}}) {
    const std::vector<float> d = RandomFloats(rows * cols, 7);
    auto d_d = ToDevice(d);
    auto d_db = Poisoned<float>(cols);
    LaunchColumnSums(d_d.get(), rows, cols, d_db.get(), stream());
    Sync();
    const std::vector<float> got = ToHost(d_db);
    for (int64_t c = 0; c < cols; ++c) {
      double sum = 0, abs_sum = 0;
      for (int64_t r = 0; r < rows; ++r) {
        sum += d[static_cast<std::size_t>(r * cols + c)];
        abs_sum += std::abs(d[static_cast<std::size_t>(r * cols + c)]);
      }
      ASSERT_NEAR(got[static_cast<std::size_t>(c)], sum, 1e-6 * abs_sum) << rows << "x" << cols;
    }
  }
}

TEST_F(CudaLayerTest, RowSumsAreExactSumsRounded) {
  // n from below one chunk to many chunks of the two-pass reduction.
  for (auto [channels, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {6, 100003}, {16, 1 << 20}}) {
    const std::vector<float> d = RandomFloats(channels * n, 8);
    auto d_d = ToDevice(d);
    auto d_db = Poisoned<float>(channels);
    DeviceBuffer<double> partial(RowSumsScratch(channels, n));
    LaunchRowSums(d_d.get(), channels, n, partial.get(), d_db.get(), stream());
    Sync();
    const std::vector<float> got = ToHost(d_db);
    for (int64_t c = 0; c < channels; ++c) {
      double sum = 0, abs_sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        sum += d[static_cast<std::size_t>(c * n + i)];
        abs_sum += std::abs(d[static_cast<std::size_t>(c * n + i)]);
      }
      ASSERT_NEAR(got[static_cast<std::size_t>(c)], sum, 1e-6 * abs_sum) << channels << "x" << n;
    }
  }
}

// ---- Softmax cross-entropy -----------------------------------------------------------------

struct LossOutput {
  LossSums sums;
  std::vector<float> dz;
};

// Runs the kernel on z; dz aliases z when in_place.
LossOutput RunLoss(const std::vector<float>& z, const std::vector<int32_t>& labels,
                   int64_t classes, float scale, bool with_grad, bool in_place,
                   cudaStream_t stream) {
  const auto rows = static_cast<int64_t>(labels.size());
  auto d_z = ToDevice(z);
  auto d_labels = ToDevice(labels);
  auto d_dz = Poisoned<float>(rows * classes);
  DeviceBuffer<double> row_loss(rows);
  DeviceBuffer<int32_t> row_correct(rows);
  DeviceBuffer<LossSums> sums(1);
  float* dz = with_grad ? (in_place ? d_z.get() : d_dz.get()) : nullptr;
  LaunchSoftmaxCrossEntropy(d_z.get(), d_labels.get(), rows, classes, scale, dz, row_loss.get(),
                            row_correct.get(), sums.get(), stream);
  ASGD_CUDA_CHECK(cudaStreamSynchronize(stream));
  LossOutput out;
  out.sums = ToHost(sums)[0];
  if (with_grad) out.dz = ToHost(dz, rows * classes);
  return out;
}

TEST_F(CudaLayerTest, SoftmaxCrossEntropyMatchesCpu) {
  const int64_t rows = 37, classes = 10;
  std::vector<float> z = RandomFloats(rows * classes, 9, 3.0);
  std::vector<int32_t> labels;
  Rng rng(10);
  for (int64_t r = 0; r < rows; ++r) labels.push_back(static_cast<int32_t>(rng.UniformInt(classes)));
  // Row 0: all equal (the first argmax, class 0, wins); row 1: huge logits.
  for (int64_t c = 0; c < classes; ++c) z[static_cast<std::size_t>(c)] = 0.5f;
  labels[0] = 0;
  z[static_cast<std::size_t>(classes + 3)] = 1000.0f;
  z[static_cast<std::size_t>(classes + 4)] = -1000.0f;
  const float scale = 1.0f / static_cast<float>(rows);

  std::vector<float> expected_dz(z.size());
  EvalResult expected;
  layers::SoftmaxCrossEntropy<float>(z.data(), labels.data(), rows, classes, scale,
                                     expected_dz.data(), &expected);
  for (bool in_place : {false, true}) {
    const LossOutput got = RunLoss(z, labels, classes, scale, true, in_place, stream());
    EXPECT_NEAR(got.sums.loss_sum, expected.loss_sum, 1e-5 * (1 + expected.loss_sum));
    EXPECT_EQ(got.sums.correct, expected.correct);
    for (std::size_t i = 0; i < z.size(); ++i) {
      ASSERT_NEAR(got.dz[i], expected_dz[i], 4e-6 * scale) << i << (in_place ? " in place" : "");
    }
  }
  // Loss only.
  const LossOutput loss_only = RunLoss(z, labels, classes, scale, false, false, stream());
  EXPECT_EQ(loss_only.sums.loss_sum, RunLoss(z, labels, classes, scale, true, false, stream()).sums.loss_sum);
  EXPECT_EQ(loss_only.sums.correct, expected.correct);
}

// ---- Convolution pieces ----------------------------------------------------------------------

// 3 examples of 2 × 7 × 9, kernel 3, padding pad.
ConvBlockShape Shape(int64_t pad) {
  ConvBlockShape s{};
  s.in_channels = 2;
  s.in_height = 7;
  s.in_width = 9;
  s.out_channels = 4;
  s.kernel = 3;
  s.pad = pad;
  s.conv_height = s.in_height + 2 * pad - 2;
  s.conv_width = s.in_width + 2 * pad - 2;
  s.pool_height = s.conv_height / 2;
  s.pool_width = s.conv_width / 2;
  return s;
}

ConvGeometry Geometry(const ConvBlockShape& s) {
  return {s.in_channels, s.in_height, s.in_width, s.kernel, s.pad, s.conv_height, s.conv_width};
}

class CudaConvTest : public CudaTest, public ::testing::WithParamInterface<int64_t> {
 protected:
  static constexpr int64_t kBatch = 3;
  // NCHW input (as the first block sees it) with pad 1, CNHW (later blocks) with pad 0.
  int64_t CStride(const ConvBlockShape& s) const {
    const int64_t plane = s.in_height * s.in_width;
    return GetParam() == 1 ? plane : kBatch * plane;
  }
  int64_t NStride(const ConvBlockShape& s) const {
    const int64_t plane = s.in_height * s.in_width;
    return GetParam() == 1 ? s.in_channels * plane : plane;
  }
};

TEST_P(CudaConvTest, Im2ColIsExact) {
  const ConvBlockShape s = Shape(GetParam());
  const std::vector<float> in = RandomFloats(kBatch * s.in_channels * s.in_height * s.in_width, 11);
  const int64_t k = s.in_channels * s.kernel * s.kernel;
  const int64_t n = kBatch * s.conv_height * s.conv_width;
  std::vector<float> expected(static_cast<std::size_t>(k * n));
  layers::Im2Col<float, float>(in.data(), kBatch, CStride(s), NStride(s), s, expected.data());
  auto d_in = ToDevice(in);
  auto d_cols = Poisoned<float>(k * n);
  LaunchIm2Col(d_in.get(), kBatch, CStride(s), NStride(s), Geometry(s), d_cols.get(), stream());
  Sync();
  EXPECT_EQ(ToHost(d_cols), expected);
}

TEST_P(CudaConvTest, Col2ImMatchesCpu) {
  const ConvBlockShape s = Shape(GetParam());
  const int64_t k = s.in_channels * s.kernel * s.kernel;
  const int64_t n = kBatch * s.conv_height * s.conv_width;
  const std::vector<float> cols = RandomFloats(k * n, 12);
  const int64_t in_size = kBatch * s.in_channels * s.in_height * s.in_width;
  std::vector<float> expected(static_cast<std::size_t>(in_size));
  layers::Col2Im<float>(cols.data(), kBatch, CStride(s), NStride(s), s, expected.data());
  auto d_cols = ToDevice(cols);
  auto d_in = Poisoned<float>(in_size);
  LaunchCol2Im(d_cols.get(), kBatch, CStride(s), NStride(s), Geometry(s), d_in.get(), stream());
  Sync();
  const std::vector<float> got = ToHost(d_in);
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_FLOAT_EQ(got[i], expected[i]) << i;
}

INSTANTIATE_TEST_SUITE_P(Padding, CudaConvTest, ::testing::Values(int64_t{1}, int64_t{0}),
                         [](const auto& p) { return p.param == 1 ? "SameNchw" : "ValidCnhw"; });

TEST_F(CudaLayerTest, MaxPoolingIsExactWithTies) {
  // Odd sizes (the last row and column are dropped) and values from {0, 1, 2}: many ties.
  const int64_t planes = 4, h = 5, w = 7;
  const int64_t pooled = planes * (h / 2) * (w / 2);
  std::vector<float> in(static_cast<std::size_t>(planes * h * w));
  Rng rng(13);
  for (float& x : in) x = static_cast<float>(rng.UniformInt(3));
  std::vector<float> expected_out(static_cast<std::size_t>(pooled));
  std::vector<int32_t> expected_argmax(static_cast<std::size_t>(pooled));
  layers::MaxPoolForward<float>(in.data(), planes, h, w, expected_out.data(),
                                expected_argmax.data());
  auto d_in = ToDevice(in);
  auto d_out = Poisoned<float>(pooled);
  auto d_argmax = Poisoned<int32_t>(pooled);
  LaunchMaxPoolForward(d_in.get(), planes, h, w, d_out.get(), d_argmax.get(), stream());
  Sync();
  EXPECT_EQ(ToHost(d_out), expected_out);
  EXPECT_EQ(ToHost(d_argmax), expected_argmax);

  const std::vector<float> dout = RandomFloats(pooled, 14);
  std::vector<float> expected_din(in.size());
  layers::MaxPoolBackward<float>(dout.data(), expected_argmax.data(), planes, h, w,
                                 expected_din.data());
  auto d_dout = ToDevice(dout);
  auto d_din = Poisoned<float>(planes * h * w);
  LaunchMaxPoolBackward(d_dout.get(), d_argmax.get(), planes, h, w, d_din.get(), stream());
  Sync();
  EXPECT_EQ(ToHost(d_din), expected_din);
}

TEST_F(CudaLayerTest, CnhwTransposesAreExact) {
  const int64_t channels = 3, batch = 4, plane = 5;
  const std::vector<float> cnhw = RandomFloats(channels * batch * plane, 15);
  // As models/cnn.cc flattens: rows[r][c·P + p] = cnhw[(c·B + r)·P + p].
  std::vector<float> expected(cnhw.size());
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t r = 0; r < batch; ++r) {
      for (int64_t p = 0; p < plane; ++p) {
        expected[static_cast<std::size_t>(r * channels * plane + c * plane + p)] =
            cnhw[static_cast<std::size_t>((c * batch + r) * plane + p)];
      }
    }
  }
  auto d_cnhw = ToDevice(cnhw);
  auto d_rows = Poisoned<float>(channels * batch * plane);
  auto d_back = Poisoned<float>(channels * batch * plane);
  LaunchCnhwToRows(d_cnhw.get(), channels, batch, plane, d_rows.get(), stream());
  LaunchRowsToCnhw(d_rows.get(), channels, batch, plane, d_back.get(), stream());
  Sync();
  EXPECT_EQ(ToHost(d_rows), expected);
  EXPECT_EQ(ToHost(d_back), cnhw);
}

// ---- GEMM ---------------------------------------------------------------------------------------

class CudaGemmTest : public CudaTest,
                     public ::testing::WithParamInterface<std::pair<Op, Op>> {};

TEST_P(CudaGemmTest, RowMajorProductsMatchDouble) {
  const auto [op_a, op_b] = GetParam();
  const int64_t m = 37, n = 19, k = 53;
  const std::vector<float> a = RandomFloats(m * k, 16);
  const std::vector<float> b = RandomFloats(k * n, 17);
  // Element (i, l) of op(A) and (l, j) of op(B), from the row-major stored matrices.
  auto at = [&](int64_t i, int64_t l) {
    return static_cast<double>(a[static_cast<std::size_t>(op_a == Op::kN ? i * k + l : l * m + i)]);
  };
  auto bt = [&](int64_t l, int64_t j) {
    return static_cast<double>(b[static_cast<std::size_t>(op_b == Op::kN ? l * n + j : j * k + l)]);
  };
  auto d_a = ToDevice(a);
  auto d_b = ToDevice(b);
  auto d_c = Poisoned<float>(m * n);
  CublasHandle handle;
  handle.Bind(stream());
  RowMajorGemm(handle.get(), op_a, op_b, m, n, k, d_a.get(), d_b.get(), d_c.get());
  Sync();
  const std::vector<float> c = ToHost(d_c);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0, bound = 0;
      for (int64_t l = 0; l < k; ++l) {
        exact += at(i, l) * bt(l, j);
        bound += std::abs(at(i, l) * bt(l, j));
      }
      ASSERT_NEAR(c[static_cast<std::size_t>(i * n + j)], exact, 1e-5 * bound) << i << "," << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaGemmTest,
                         ::testing::Values(std::pair{Op::kN, Op::kN}, std::pair{Op::kT, Op::kN},
                                           std::pair{Op::kN, Op::kT}, std::pair{Op::kT, Op::kT}),
                         [](const auto& p) {
                           return std::string(p.param.first == Op::kN ? "N" : "T") +
                                  (p.param.second == Op::kN ? "N" : "T");
                         });

}  // namespace
}  // namespace asgd::models::cuda
