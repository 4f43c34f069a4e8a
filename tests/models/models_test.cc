// The CPU models end to end: layouts, initialisation, gradients (double-checked against
// finite differences and against the float path), determinism, clones, sparse gradients,
// evaluation and short training runs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/rng.h"
#include "models/cnn.h"
#include "models/cpu_model.h"
#include "models/factory.h"
#include "models/logreg.h"
#include "models/mlp.h"
#include "tests/models/gradient_ready_check.h"
#include "tests/models/test_data.h"

namespace asgd::models {
namespace {

using testing::DenseData;
using testing::InitParams;
using testing::MakeBlobs;
using testing::MakeImages;
using testing::MakeSparse;
using testing::Mlp;
using testing::NumericalGradient;
using testing::PerturbedParams;
using testing::RelativeError;
using testing::SmallCnn;
using testing::SparseData;

// ---- Gradient checks --------------------------------------------------------------------

// Checks the gradient of `model` at perturbed initial parameters on `batch` twice:
//   1. the double-precision gradient against central differences of the double loss
//      (eps 1e-6), per tensor, to a relative error of 1e-5;
//   2. the float gradient (the production path) against the double gradient, per tensor,
//      to 1e-4, and the float loss against the double loss.
// max_coords limits the finite differences to that many coordinates per tensor (spread
// evenly) for large models; 0 checks all.
void CheckModelGradient(Model& model, const datasets::BatchView& batch, uint64_t seed,
                        int64_t max_coords = 0) {
  auto& cpu = dynamic_cast<CpuModel&>(model);
  const std::vector<float> pf = PerturbedParams(model, seed);
  const std::vector<double> pd(pf.begin(), pf.end());
  std::vector<double> gd(pd.size());
  const double loss_d = cpu.LossAndGradientInDouble(pd, batch, gd);

  std::vector<int64_t> coords;
  for (const TensorSpec& t : model.layout().tensors()) {
    const int64_t n = max_coords > 0 ? std::min(max_coords, t.size) : t.size;
    for (int64_t i = 0; i < n; ++i) coords.push_back(t.offset + i * t.size / n);
  }
  auto loss = [&](std::span<const double> p) { return cpu.LossAndGradientInDouble(p, batch, {}); };
  const std::vector<double> numeric = NumericalGradient(loss, pd, 1e-6, coords);

  std::vector<float> gf(pf.size(), 123.0f);  // must be overwritten everywhere
  const float loss_f = model.LossAndGradient(pf, batch, gf);
  const std::vector<double> gfd(gf.begin(), gf.end());
  EXPECT_NEAR(loss_f, loss_d, 1e-5 * (1 + std::abs(loss_d)));

  for (const TensorSpec& t : model.layout().tensors()) {
    std::vector<int64_t> in_tensor;
    for (int64_t c : coords) {
      if (c >= t.offset && c < t.offset + t.size) in_tensor.push_back(c);
    }
    std::vector<int64_t> all(static_cast<std::size_t>(t.size));
    std::iota(all.begin(), all.end(), t.offset);
    EXPECT_LT(RelativeError(gd, numeric, in_tensor), 1e-5)
        << model.Describe() << ": double gradient of " << t.name;
    EXPECT_LT(RelativeError(gfd, gd, all), 1e-4)
        << model.Describe() << ": float gradient of " << t.name;
  }
}

class MlpGradientTest : public ::testing::TestWithParam<Activation> {};

TEST_P(MlpGradientTest, MatchesFiniteDifferences) {
  auto model = NewCpuMlpModel(Mlp(6, {5, 4}, GetParam(), 3));
  const DenseData d = MakeBlobs(7, 6, 3, 21, 1.0);
  CheckModelGradient(*model, d.All(), 22);
}

INSTANTIATE_TEST_SUITE_P(Activations, MlpGradientTest,
                         ::testing::Values(Activation::kRelu, Activation::kTanh,
                                           Activation::kSigmoid),
                         [](const auto& p) { return std::string(ActivationName(p.param)); });

TEST(SoftmaxGradient, MatchesFiniteDifferences) {
  auto model = NewCpuMlpModel(Mlp(6, {}, Activation::kRelu, 4));
  const DenseData d = MakeBlobs(9, 6, 4, 23, 1.0);
  CheckModelGradient(*model, d.All(), 24);
}

class CnnGradientTest : public ::testing::TestWithParam<Activation> {};

TEST_P(CnnGradientTest, MatchesFiniteDifferences) {
  auto model = NewCpuCnnModel(SmallCnn(GetParam()));
  const DenseData d = MakeImages(3, 2, 11, 13, 3, 25);
  CheckModelGradient(*model, d.All(), 26);
}

INSTANTIATE_TEST_SUITE_P(Activations, CnnGradientTest,
                         ::testing::Values(Activation::kRelu, Activation::kTanh,
                                           Activation::kSigmoid),
                         [](const auto& p) { return std::string(ActivationName(p.param)); });

TEST(CnnGradient, LeNetOnMnistShapesMatchesFiniteDifferences) {
  auto model = NewCpuCnnModel(CnnArchitecture{});
  const DenseData d = MakeImages(2, 1, 28, 28, 4, 27);
  CheckModelGradient(*model, d.All(), 28, /*max_coords=*/12);
}

TEST(LogRegGradient, MatchesFiniteDifferences) {
  auto model = NewCpuLogRegModel(LogRegArchitecture{12});
  const SparseData d = MakeSparse(9, 12, 4, 29, /*random_values=*/true);
  // A view that does not start at row 0 (absolute CSR offsets).
  CheckModelGradient(*model, d.View(2, 7), 30);
}

// ---- Layouts -------------------------------------------------------------------------------

void ExpectTensor(const ParamLayout& l, const std::string& name, std::vector<int64_t> shape,
                  int64_t offset) {
  const int i = l.Find(name);
  ASSERT_GE(i, 0) << name;
  EXPECT_EQ(l.tensor(i).shape, shape) << name;
  EXPECT_EQ(l.tensor(i).offset, offset) << name;
}

TEST(Layout, Mlp784x256x256x10) {
  auto model = NewCpuMlpModel(Mlp(784, {256, 256}, Activation::kRelu, 10));
  const ParamLayout& l = model->layout();
  ASSERT_EQ(l.tensors().size(), 6u);
  ExpectTensor(l, "fc1.weight", {784, 256}, 0);
  ExpectTensor(l, "fc1.bias", {256}, 200704);
  ExpectTensor(l, "fc2.weight", {256, 256}, 200960);
  ExpectTensor(l, "fc2.bias", {256}, 266496);
  ExpectTensor(l, "fc3.weight", {256, 10}, 266752);
  ExpectTensor(l, "fc3.bias", {10}, 269312);
  EXPECT_EQ(l.size(), 269322);
  EXPECT_EQ(model->Name(), "mlp");
  EXPECT_EQ(model->Describe(), "mlp 784-256-256-10 relu (269322 params)");
  EXPECT_EQ(model->num_features(), 784);
  EXPECT_EQ(model->num_classes(), 10);
  EXPECT_FALSE(model->sparse_input());
  EXPECT_FALSE(model->HasSparseGradient());
}

TEST(Layout, Softmax) {
  auto model = NewCpuMlpModel(Mlp(784, {}, Activation::kRelu, 10));
  const ParamLayout& l = model->layout();
  ASSERT_EQ(l.tensors().size(), 2u);
  ExpectTensor(l, "fc1.weight", {784, 10}, 0);
  ExpectTensor(l, "fc1.bias", {10}, 7840);
  EXPECT_EQ(l.size(), 7850);
  EXPECT_EQ(model->Name(), "softmax");
  EXPECT_EQ(model->Describe(), "softmax 784-10 (7850 params)");
}

TEST(Layout, LeNet) {
  auto model = NewCpuCnnModel(CnnArchitecture{});
  const ParamLayout& l = model->layout();
  ASSERT_EQ(l.tensors().size(), 10u);
  ExpectTensor(l, "conv1.weight", {6, 1, 5, 5}, 0);
  ExpectTensor(l, "conv1.bias", {6}, 150);
  ExpectTensor(l, "conv2.weight", {16, 6, 5, 5}, 156);
  ExpectTensor(l, "conv2.bias", {16}, 2556);
  ExpectTensor(l, "fc1.weight", {400, 120}, 2572);
  ExpectTensor(l, "fc1.bias", {120}, 50572);
  ExpectTensor(l, "fc2.weight", {120, 84}, 50692);
  ExpectTensor(l, "fc2.bias", {84}, 60772);
  ExpectTensor(l, "fc3.weight", {84, 10}, 60856);
  ExpectTensor(l, "fc3.bias", {10}, 61696);
  EXPECT_EQ(l.size(), 61706);
  EXPECT_EQ(model->num_features(), 784);
  EXPECT_EQ(model->Describe(), "cnn 1x28x28 conv5x5 6-16 fc 120-84-10 relu (61706 params)");
}

TEST(Layout, LogReg) {
  auto model = NewCpuLogRegModel(LogRegArchitecture{123});
  const ParamLayout& l = model->layout();
  ASSERT_EQ(l.tensors().size(), 2u);
  ExpectTensor(l, "fc1.weight", {123, 1}, 0);
  ExpectTensor(l, "fc1.bias", {1}, 123);
  EXPECT_EQ(l.size(), 124);
  EXPECT_TRUE(model->sparse_input());
  EXPECT_TRUE(model->HasSparseGradient());
  EXPECT_EQ(model->num_classes(), 2);
}

TEST(Layout, ClonesAgree) {
  auto model = NewCpuCnnModel(CnnArchitecture{});
  auto clone = model->Clone();
  EXPECT_EQ(clone->layout(), model->layout());
  EXPECT_EQ(clone->layout().Fingerprint(), model->layout().Fingerprint());
  EXPECT_EQ(clone->Describe(), model->Describe());
}

// ---- Initialisation ---------------------------------------------------------------------------

TEST(Initialize, FollowsTheDocumentedRuleExactly) {
  // What a CUDA (or any other) implementation must reproduce: a generator per tensor seeded
  // with DeriveSeed(seed, "init." + name), row-major draws, He normal before ReLU, Glorot
  // uniform elsewhere, zero biases.
  auto model = NewCpuMlpModel(Mlp(20, {8}, Activation::kRelu, 3));
  const std::vector<float> p = InitParams(*model, 77);
  Rng he(DeriveSeed(77, "init.fc1.weight"));
  for (int64_t i = 0; i < 160; ++i) {
    ASSERT_EQ(p[static_cast<std::size_t>(i)],
              static_cast<float>(he.Normal() * std::sqrt(2.0 / 20.0)));
  }
  for (int64_t i = 160; i < 168; ++i) ASSERT_EQ(p[static_cast<std::size_t>(i)], 0.0f);
  Rng glorot(DeriveSeed(77, "init.fc2.weight"));
  const double a = std::sqrt(6.0 / (8 + 3));
  for (int64_t i = 168; i < 192; ++i) {
    ASSERT_EQ(p[static_cast<std::size_t>(i)], static_cast<float>(glorot.Uniform(-a, a)));
  }
  for (int64_t i = 192; i < 195; ++i) ASSERT_EQ(p[static_cast<std::size_t>(i)], 0.0f);
}

TEST(Initialize, HeAndGlorotStatistics) {
  auto relu = NewCpuMlpModel(Mlp(784, {256, 256}, Activation::kRelu, 10));
  auto tanh = NewCpuMlpModel(Mlp(784, {256, 256}, Activation::kTanh, 10));
  const std::vector<float> pr = InitParams(*relu, 5);
  const std::vector<float> pt = InitParams(*tanh, 5);
  auto stats = [](const std::vector<float>& p, const TensorSpec& t) {
    double sum = 0, sq = 0, max_abs = 0;
    for (int64_t i = t.offset; i < t.offset + t.size; ++i) {
      const double v = p[static_cast<std::size_t>(i)];
      sum += v;
      sq += v * v;
      max_abs = std::max(max_abs, std::abs(v));
    }
    const double n = static_cast<double>(t.size);
    return std::make_pair(std::sqrt(sq / n - (sum / n) * (sum / n)), max_abs);
  };
  const ParamLayout& l = relu->layout();
  // ReLU hidden layers: He, std sqrt(2 / fan_in).
  EXPECT_NEAR(stats(pr, l.Get("fc1.weight")).first, std::sqrt(2.0 / 784),
              0.02 * std::sqrt(2.0 / 784));
  EXPECT_NEAR(stats(pr, l.Get("fc2.weight")).first, std::sqrt(2.0 / 256),
              0.02 * std::sqrt(2.0 / 256));
  // Output layer and tanh layers: Glorot, |w| < a and std a / sqrt(3).
  for (auto [p, name, in, out] :
       {std::make_tuple(&pr, "fc3.weight", 256, 10), std::make_tuple(&pt, "fc1.weight", 784, 256),
        std::make_tuple(&pt, "fc3.weight", 256, 10)}) {
    const double a = std::sqrt(6.0 / (in + out));
    const auto [std_dev, max_abs] = stats(*p, l.Get(name));
    EXPECT_LE(max_abs, a) << name;
    EXPECT_NEAR(std_dev, a / std::sqrt(3.0), 0.06 * a) << name;
  }
  for (const char* bias : {"fc1.bias", "fc2.bias", "fc3.bias"}) {
    EXPECT_EQ(stats(pr, l.Get(bias)).second, 0.0) << bias;
  }
}

TEST(Initialize, DeterministicBySeed) {
  std::vector<std::unique_ptr<Model>> models;
  models.push_back(NewCpuMlpModel(Mlp(784, {256, 256}, Activation::kRelu, 10)));
  models.push_back(NewCpuCnnModel(CnnArchitecture{}));
  models.push_back(NewCpuLogRegModel({123}));
  for (const auto& model : models) {
    const std::vector<float> a = InitParams(*model, 1);
    const std::vector<float> b = InitParams(*model->Clone(), 1);
    const std::vector<float> c = InitParams(*model, 2);
    EXPECT_EQ(a, b) << model->Name();
    EXPECT_NE(a, c) << model->Name();
  }
}

// ---- Determinism and clones
// ----------------------------------------------------------------------

TEST(Determinism, SameInputsGiveBitwiseSameGradients) {
  auto model = NewCpuCnnModel(SmallCnn(Activation::kRelu));
  const DenseData d = MakeImages(10, 2, 11, 13, 3, 31);
  const std::vector<float> p = PerturbedParams(*model, 32);
  std::vector<float> g1(p.size()), g2(p.size());
  const float l1 = model->LossAndGradient(p, d.All(), g1);
  const float l2 = model->LossAndGradient(p, d.All(), g2);
  EXPECT_EQ(std::memcmp(&l1, &l2, sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)), 0);
}

TEST(Clone, IsIndependentOfTheOriginal) {
  auto model = NewCpuMlpModel(Mlp(10, {16, 8}, Activation::kTanh, 4));
  const DenseData d = MakeBlobs(100, 10, 4, 33);
  const std::vector<float> p = PerturbedParams(*model, 34);
  std::vector<float> g(p.size()), g_clone(p.size()), g_again(p.size()), scratch(p.size());
  const float loss = model->LossAndGradient(p, d.View(0, 8), g);
  auto clone = model->Clone();
  // The clone grows its own scratch on a larger batch; the original is unaffected.
  clone->LossAndGradient(p, d.All(), scratch);
  const float loss_clone = clone->LossAndGradient(p, d.View(0, 8), g_clone);
  model->LossAndGradient(p, d.View(50, 30), scratch);
  const float loss_again = model->LossAndGradient(p, d.View(0, 8), g_again);
  EXPECT_EQ(loss, loss_clone);
  EXPECT_EQ(loss, loss_again);
  EXPECT_EQ(g, g_clone);
  EXPECT_EQ(g, g_again);
}

TEST(Clone, InstancesRunConcurrently) {
  auto model = NewCpuMlpModel(Mlp(10, {16}, Activation::kRelu, 4));
  const DenseData d = MakeBlobs(64, 10, 4, 35);
  const std::vector<float> p = PerturbedParams(*model, 36);
  std::vector<float> expected(p.size());
  model->LossAndGradient(p, d.All(), expected);
  std::vector<std::unique_ptr<Model>> clones;
  std::vector<std::vector<float>> grads(4, std::vector<float>(p.size()));
  for (int i = 0; i < 4; ++i) clones.push_back(model->Clone());
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 20; ++rep)
        clones[static_cast<std::size_t>(i)]->LossAndGradient(p, d.All(),
                                                             grads[static_cast<std::size_t>(i)]);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& g : grads) EXPECT_EQ(g, expected);
}

// ---- Gradients reported layer by layer (LossAndGradientReporting) ------------------------

using testing::ExpectReportsAgree;
using testing::LayerRange;

TEST(ReportingGradient, MlpReportsEachLayerLastFirstWithTheSameBits) {
  for (const Activation a : {Activation::kRelu, Activation::kTanh}) {
    auto model = NewCpuMlpModel(Mlp(10, {16, 8}, a, 4));
    const DenseData d = MakeBlobs(40, 10, 4, 61);
    const std::vector<float> p = PerturbedParams(*model, 62);
    EXPECT_TRUE(model->ReportsGradientByLayer());
    const std::vector<Range> ranges = ExpectReportsAgree(*model, p, d.All());
    const ParamLayout& l = model->layout();
    EXPECT_EQ(ranges, (std::vector<Range>{LayerRange(l, "fc3"), LayerRange(l, "fc2"),
                                          LayerRange(l, "fc1")}));
  }
  auto softmax = NewCpuMlpModel(Mlp(10, {}, Activation::kRelu, 4));
  const std::vector<float> p = PerturbedParams(*softmax, 63);
  EXPECT_EQ(ExpectReportsAgree(*softmax, p, MakeBlobs(9, 10, 4, 64).All()),
            (std::vector<Range>{{0, softmax->layout().size()}}));
}

TEST(ReportingGradient, CnnReportsTheDenseLayersThenTheConvolutionsLastFirst) {
  auto model = NewCpuCnnModel(SmallCnn(Activation::kRelu));
  const DenseData d = MakeImages(12, 2, 11, 13, 3, 65);
  const std::vector<float> p = PerturbedParams(*model, 66);
  EXPECT_TRUE(model->ReportsGradientByLayer());
  const ParamLayout& l = model->layout();
  EXPECT_EQ(ExpectReportsAgree(*model, p, d.All()),
            (std::vector<Range>{LayerRange(l, "fc2"), LayerRange(l, "fc1"),
                                LayerRange(l, "conv2"), LayerRange(l, "conv1")}));
}

TEST(ReportingGradient, LogRegReportsTheWholeVectorAtTheEnd) {
  auto model = NewCpuLogRegModel({30});
  const SparseData d = MakeSparse(20, 30, 5, 67);
  const std::vector<float> p = PerturbedParams(*model, 68);
  EXPECT_FALSE(model->ReportsGradientByLayer());
  EXPECT_EQ(ExpectReportsAgree(*model, p, d.All()),
            (std::vector<Range>{{0, model->layout().size()}}));
}

// ---- Sparse gradient ---------------------------------------------------------------------------

TEST(SparseGradient, EqualsTheDenseGradientAtTouchedCoordinates) {
  const int64_t features = 123;
  auto model = NewCpuLogRegModel({features});
  const SparseData d = MakeSparse(200, features, 14, 37, /*random_values=*/true);
  const std::vector<float> p = PerturbedParams(*model, 38);
  for (auto [begin, count] : {std::pair<int64_t, int64_t>{0, 1}, {5, 16}, {40, 128}}) {
    const datasets::BatchView batch = d.View(begin, count);
    std::vector<float> dense(p.size());
    const float loss = model->LossAndGradient(p, batch, dense);
    SparseGradient sparse;
    const float sparse_loss = model->LossAndSparseGradient(p, batch, &sparse);
    EXPECT_EQ(loss, sparse_loss);

    // The touched coordinates: the batch's distinct features, then the bias.
    std::vector<int64_t> expected;
    for (int64_t k = batch.indptr[0]; k < batch.indptr[count]; ++k) {
      expected.push_back(d.indices[static_cast<std::size_t>(k)]);
    }
    std::sort(expected.begin(), expected.end());
    expected.erase(std::unique(expected.begin(), expected.end()), expected.end());
    expected.push_back(features);
    ASSERT_EQ(sparse.indices, expected);
    ASSERT_EQ(sparse.values.size(), expected.size());
    // What a worker pulls before the step is exactly what the step touches.
    std::vector<int64_t> coordinates = {-1};
    model->SparseCoordinates(batch, &coordinates);
    EXPECT_EQ(coordinates, expected);

    std::vector<float> scattered(p.size(), 0.0f);
    for (std::size_t i = 0; i < sparse.indices.size(); ++i) {
      scattered[static_cast<std::size_t>(sparse.indices[i])] = sparse.values[i];
    }
    EXPECT_EQ(scattered, dense);  // bitwise, zero elsewhere
  }
}

TEST(SparseGradient, DenseModelsHaveNone) {
  auto model = NewCpuMlpModel(Mlp(4, {3}, Activation::kRelu, 2));
  const DenseData d = MakeBlobs(4, 4, 2, 39);
  const std::vector<float> p = InitParams(*model, 1);
  SparseGradient g;
  EXPECT_FALSE(model->HasSparseGradient());
  EXPECT_THROW(model->LossAndSparseGradient(p, d.All(), &g), InvariantError);
  std::vector<int64_t> coordinates;
  EXPECT_THROW(model->SparseCoordinates(d.All(), &coordinates), InvariantError);
}

// ---- Evaluate
// ------------------------------------------------------------------------------------

void ExpectEvaluateAgrees(Model& model, const datasets::BatchView& batch, uint64_t seed) {
  const std::vector<float> p = PerturbedParams(model, seed);
  std::vector<float> g(p.size());
  const float loss = model.LossAndGradient(p, batch, g);
  // More examples than one evaluation chunk, so the chunking is exercised.
  ASSERT_GT(batch.size, kEvalChunk);
  const EvalResult r = model.Evaluate(p, batch);
  EXPECT_EQ(r.count, batch.size);
  EXPECT_NEAR(r.mean_loss(), loss, 1e-5 * (1 + std::abs(loss))) << model.Name();
  EXPECT_GE(r.correct, 0);
  EXPECT_LE(r.correct, r.count);
  // The sum over two halves is the whole, to float precision: each example's loss is a
  // float, and the GEMM may block a chunk's rows differently when the chunks start
  // elsewhere (seen with the generic x86-64 build; with AVX-512 they agreed to 1e-9).
  const int64_t half = batch.size / 2;
  EvalResult parts = model.Evaluate(p, SliceBatch(batch, 0, half));
  parts += model.Evaluate(p, SliceBatch(batch, half, batch.size - half));
  EXPECT_NEAR(parts.loss_sum, r.loss_sum, 1e-6 * (1 + r.loss_sum));
  EXPECT_EQ(parts.correct, r.correct);
  EXPECT_EQ(model.Evaluate(p, SliceBatch(batch, 0, 0)).count, 0);
}

TEST(Evaluate, AgreesWithLossAndGradient) {
  auto mlp = NewCpuMlpModel(Mlp(12, {16}, Activation::kSigmoid, 3));
  ExpectEvaluateAgrees(*mlp, MakeBlobs(600, 12, 3, 41).All(), 42);
  auto cnn = NewCpuCnnModel(SmallCnn(Activation::kRelu));
  const DenseData images = MakeImages(300, 2, 11, 13, 3, 43);
  ExpectEvaluateAgrees(*cnn, images.All(), 44);
  auto logreg = NewCpuLogRegModel({50});
  const SparseData sparse = MakeSparse(700, 50, 6, 45);
  ExpectEvaluateAgrees(*logreg, sparse.View(100, 600), 46);
}

TEST(Evaluate, CountsArgmaxAccuracy) {
  // softmax 2-2 with W = I, b = 0: the prediction is the larger coordinate.
  auto model = NewCpuMlpModel(Mlp(2, {}, Activation::kRelu, 2));
  const std::vector<float> p = {1, 0, 0, 1, 0, 0};
  DenseData d;
  d.features = 2;
  d.x = {3, 1, 0, 2, 5, 4, 1, 7};
  d.labels = {0, 1, 1, 1};  // predictions 0, 1, 0, 1
  const EvalResult r = model->Evaluate(p, d.All());
  EXPECT_EQ(r.correct, 3);
  EXPECT_EQ(r.count, 4);
  EXPECT_DOUBLE_EQ(r.accuracy(), 0.75);
}

// ---- Argument checks
// -----------------------------------------------------------------------------

TEST(Checks, BadArgumentsThrowInvariantError) {
  auto mlp = NewCpuMlpModel(Mlp(4, {3}, Activation::kRelu, 2));
  const DenseData d = MakeBlobs(4, 4, 2, 47);
  std::vector<float> p = InitParams(*mlp, 1), g(p.size()), short_g(p.size() - 1);
  EXPECT_THROW(mlp->LossAndGradient(p, d.All(), short_g), InvariantError);
  EXPECT_THROW(mlp->LossAndGradient(short_g, d.All(), g), InvariantError);
  EXPECT_THROW(mlp->LossAndGradient(p, d.View(0, 0), g), InvariantError);
  datasets::BatchView wrong = d.All();
  wrong.num_features = 5;
  EXPECT_THROW(mlp->LossAndGradient(p, wrong, g), InvariantError);
  DenseData bad_label = d;
  bad_label.labels[2] = 2;
  EXPECT_THROW(mlp->LossAndGradient(p, bad_label.All(), g), InvariantError);
  const SparseData s = MakeSparse(4, 4, 2, 48);
  EXPECT_THROW(mlp->LossAndGradient(p, s.All(), g), InvariantError);

  auto logreg = NewCpuLogRegModel({4});
  std::vector<float> lp = InitParams(*logreg, 1), lg(lp.size());
  datasets::BatchView dense4 = d.All();
  EXPECT_THROW(logreg->LossAndGradient(lp, dense4, lg), InvariantError);
  SparseData s3 = MakeSparse(4, 4, 2, 49);
  s3.labels[0] = 2;
  EXPECT_THROW(logreg->LossAndGradient(lp, s3.All(), lg), InvariantError);
  SparseData s_big = MakeSparse(4, 8, 2, 50);
  s_big.features = 4;  // indices up to 7
  EXPECT_THROW(logreg->LossAndGradient(lp, s_big.All(), lg), InvariantError);
}

// ---- Training
// ------------------------------------------------------------------------------------

// Plain SGD on `data` for `steps` mini-batches; returns (initial, final) mean loss over all
// the data and the final accuracy.
struct TrainResult {
  double initial_loss, final_loss, accuracy;
};

template <typename Data>
TrainResult Train(Model& model, const Data& data, int64_t batch, int steps, float lr) {
  std::vector<float> p = InitParams(model, 51);
  std::vector<float> g(p.size());
  const double initial = model.Evaluate(p, data.All()).mean_loss();
  int64_t at = 0;
  for (int s = 0; s < steps; ++s) {
    if (at + batch > data.size()) at = 0;
    const float loss = model.LossAndGradient(p, data.View(at, batch), g);
    EXPECT_TRUE(std::isfinite(loss));
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= lr * g[i];
    at += batch;
  }
  const EvalResult r = model.Evaluate(p, data.All());
  return {initial, r.mean_loss(), r.accuracy()};
}

TEST(Training, EveryModelLearnsASeparableProblem) {
  const DenseData blobs = MakeBlobs(512, 20, 4, 52, 1.0, 0.5);
  const DenseData images = MakeImages(256, 1, 12, 12, 4, 53);
  const SparseData sparse = MakeSparse(1024, 60, 8, 54);
  struct Case {
    std::unique_ptr<Model> model;
    float lr;
    int steps;
  };
  std::vector<Case> cases;
  cases.push_back({NewCpuMlpModel(Mlp(20, {}, Activation::kRelu, 4)), 0.1f, 150});
  cases.push_back({NewCpuMlpModel(Mlp(20, {32, 32}, Activation::kRelu, 4)), 0.1f, 150});
  cases.push_back({NewCpuMlpModel(Mlp(20, {32}, Activation::kTanh, 4)), 0.1f, 150});
  cases.push_back({NewCpuMlpModel(Mlp(20, {32}, Activation::kSigmoid, 4)), 0.5f, 150});
  CnnArchitecture cnn;
  cnn.height = cnn.width = 12;
  cnn.channels = {4, 8};
  cnn.fc = {16};
  cnn.kernel = 3;
  cnn.classes = 4;
  cases.push_back({NewCpuCnnModel(cnn), 0.1f, 150});
  cases.push_back({NewCpuLogRegModel({60}), 1.0f, 300});
  for (Case& c : cases) {
    const TrainResult r = c.model->Name() == "cnn"      ? Train(*c.model, images, 32, c.steps, c.lr)
                          : c.model->Name() == "logreg" ? Train(*c.model, sparse, 32, c.steps, c.lr)
                                                        : Train(*c.model, blobs, 32, c.steps, c.lr);
    EXPECT_LT(r.final_loss, 0.5 * r.initial_loss) << c.model->Describe();
    EXPECT_GT(r.accuracy, 0.9) << c.model->Describe();
  }
}

}  // namespace
}  // namespace asgd::models
