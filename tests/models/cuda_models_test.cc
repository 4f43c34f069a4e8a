// The CUDA models end to end against the CPU (Eigen) models on the same parameters and
// batches: layouts and initial values (identical), loss, accuracy counts and gradients
// (within tolerances, below), evaluation, the device-side entry points, determinism,
// several instances sharing the device, argument checks and short training runs.
//
// Tolerances, and why. The reference is the CPU model in double precision
// (CpuModel::LossAndGradientInDouble), which models_test checks against finite
// differences; the GPU model must be as close to it as the CPU float path is required to
// be there:
//   * mean loss within 1e-5·(1 + |loss|);
//   * gradient: relative L2 error ‖g_gpu − g_double‖ / ‖g_double‖ < 1e-4 per tensor (and
//     < 2e-4 against the CPU float gradient: both are within 1e-4 of double);
//   * correct counts equal to the CPU float model's (an argmax flips only for logits
//     within ~1e-6 of each other; the seeded data have none);
//   * training: after 300 SGD steps from the same initial parameters, the GPU and CPU
//     runs' full-data mean losses within 1% + 1e-3 and accuracies within 0.01. Float
//     rounding differs (cuBLAS vs Eigen summation order), so trajectories drift apart
//     slowly; on these well-conditioned problems the drift stays far below 1%.
// Every test here needs a device and skips itself, naming the reason, without one.
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/rng.h"
#include "models/cnn.h"
#include "models/cpu_model.h"
#include "models/cuda/cuda_model.h"
#include "models/cuda/factory.h"
#include "models/cuda/net.h"
#include "models/mlp.h"
#include "tests/models/cuda_test_util.h"
#include "tests/models/gradient_ready_check.h"
#include "tests/models/test_data.h"

namespace asgd::models::cuda {
namespace {

using cuda::testing::CudaTest;
using cuda::testing::ToDevice;
using cuda::testing::ToHost;
using models::testing::DenseData;
using models::testing::InitParams;
using models::testing::MakeBlobs;
using models::testing::MakeImages;
using models::testing::Mlp;
using models::testing::PerturbedParams;
using models::testing::RelativeError;
using models::testing::SmallCnn;

// A CPU model and the CUDA model of the same architecture on device 0.
struct Pair {
  std::unique_ptr<Model> cpu;
  std::unique_ptr<Model> gpu;
};
Pair MakePair(const MlpArchitecture& arch) {
  return {NewCpuMlpModel(arch), NewCudaMlpModel(arch, 0)};
}
Pair MakePair(const CnnArchitecture& arch) {
  return {NewCpuCnnModel(arch), NewCudaCnnModel(arch, 0)};
}

// The comparison described at the top of this file, on one batch.
void ExpectMatchesCpu(Pair& models, const datasets::BatchView& batch, uint64_t seed) {
  Model& cpu = *models.cpu;
  Model& gpu = *models.gpu;
  const std::string what = gpu.Describe();
  ASSERT_EQ(gpu.layout(), cpu.layout()) << what;
  const std::vector<float> p = PerturbedParams(cpu, seed);
  const std::vector<double> pd(p.begin(), p.end());
  std::vector<double> gd(pd.size());
  const double loss_d = dynamic_cast<CpuModel&>(cpu).LossAndGradientInDouble(pd, batch, gd);
  std::vector<float> gf(p.size());
  cpu.LossAndGradient(p, batch, gf);
  std::vector<float> gg(p.size(), 123.0f);  // must be overwritten everywhere
  const float loss_g = gpu.LossAndGradient(p, batch, gg);

  EXPECT_NEAR(loss_g, loss_d, 1e-5 * (1 + std::abs(loss_d))) << what;
  const EvalResult cpu_eval = cpu.Evaluate(p, batch);
  const EvalResult gpu_eval = gpu.Evaluate(p, batch);
  EXPECT_EQ(gpu_eval.count, batch.size) << what;
  EXPECT_EQ(gpu_eval.correct, cpu_eval.correct) << what;
  EXPECT_NEAR(gpu_eval.loss_sum, cpu_eval.loss_sum, 1e-5 * (1 + cpu_eval.loss_sum)) << what;

  const std::vector<double> ggd(gg.begin(), gg.end());
  const std::vector<double> gfd(gf.begin(), gf.end());
  for (const TensorSpec& t : cpu.layout().tensors()) {
    std::vector<int64_t> coords(static_cast<std::size_t>(t.size));
    std::iota(coords.begin(), coords.end(), t.offset);
    EXPECT_LT(RelativeError(ggd, gd, coords), 1e-4) << what << ": gradient of " << t.name;
    EXPECT_LT(RelativeError(ggd, gfd, coords), 2e-4) << what << ": vs CPU float, " << t.name;
  }
}

// ---- Layouts and initialisation -------------------------------------------------------------

using CudaModelTest = CudaTest;

TEST_F(CudaModelTest, SameLayoutNamesAndInitialValuesAsCpu) {
  std::vector<Pair> pairs;
  pairs.push_back(MakePair(Mlp(784, {}, Activation::kRelu, 10)));
  pairs.push_back(MakePair(Mlp(784, {256, 256}, Activation::kRelu, 10)));
  pairs.push_back(MakePair(Mlp(784, {100}, Activation::kTanh, 10)));
  pairs.push_back(MakePair(CnnArchitecture{}));
  for (Pair& m : pairs) {
    EXPECT_EQ(m.gpu->Name(), m.cpu->Name());
    EXPECT_EQ(m.gpu->Describe(), m.cpu->Describe() + " on cuda:0");
    EXPECT_EQ(m.gpu->layout(), m.cpu->layout());
    EXPECT_EQ(m.gpu->layout().Fingerprint(), m.cpu->layout().Fingerprint());
    EXPECT_EQ(InitParams(*m.gpu, 9), InitParams(*m.cpu, 9)) << m.gpu->Describe();
    EXPECT_EQ(m.gpu->num_features(), m.cpu->num_features());
    EXPECT_EQ(m.gpu->num_classes(), m.cpu->num_classes());
    EXPECT_FALSE(m.gpu->sparse_input());
    EXPECT_FALSE(m.gpu->HasSparseGradient());
    auto& cuda_model = dynamic_cast<CudaModel&>(*m.gpu);
    EXPECT_EQ(cuda_model.device(), 0);
    // Parameters and gradient share one allocation; the gradient is 256-byte aligned.
    EXPECT_GE(cuda_model.device_grad() - cuda_model.device_params(), m.gpu->layout().size());
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(cuda_model.device_grad()) % 256, 0u);
  }
  EXPECT_EQ(MakePair(Mlp(784, {256, 256}, Activation::kRelu, 10)).gpu->Describe(),
            "mlp 784-256-256-10 relu (269322 params) on cuda:0");
}

// ---- Loss, accuracy and gradient against the CPU --------------------------------------------

TEST_F(CudaModelTest, SoftmaxMatchesCpu) {
  Pair m = MakePair(Mlp(6, {}, Activation::kRelu, 4));
  ExpectMatchesCpu(m, MakeBlobs(9, 6, 4, 23, 1.0).All(), 24);
  Pair mnist = MakePair(Mlp(784, {}, Activation::kRelu, 10));
  ExpectMatchesCpu(mnist, MakeImages(64, 1, 28, 28, 4, 25).All(), 26);
}

class CudaMlpTest : public CudaTest, public ::testing::WithParamInterface<Activation> {};

TEST_P(CudaMlpTest, MatchesCpu) {
  Pair small = MakePair(Mlp(6, {5, 4}, GetParam(), 3));
  ExpectMatchesCpu(small, MakeBlobs(7, 6, 3, 21, 1.0).All(), 22);
  // MNIST shapes. A modest batch: a pre-activation within float rounding (~1e-6) of a
  // ReLU's kink flips that unit's gradient between float and double; with 32 × 512
  // hidden units the chance that one does is about 1%.
  Pair mnist = MakePair(Mlp(784, {256, 256}, GetParam(), 10));
  ExpectMatchesCpu(mnist, MakeImages(32, 1, 28, 28, 4, 27).All(), 28);
}

INSTANTIATE_TEST_SUITE_P(Activations, CudaMlpTest,
                         ::testing::Values(Activation::kRelu, Activation::kTanh,
                                           Activation::kSigmoid),
                         [](const auto& p) { return std::string(ActivationName(p.param)); });

class CudaCnnTest : public CudaTest, public ::testing::WithParamInterface<Activation> {};

TEST_P(CudaCnnTest, MatchesCpu) {
  Pair m = MakePair(SmallCnn(GetParam()));
  ExpectMatchesCpu(m, MakeImages(5, 2, 11, 13, 3, 29).All(), 30);
}

INSTANTIATE_TEST_SUITE_P(Activations, CudaCnnTest,
                         ::testing::Values(Activation::kRelu, Activation::kTanh,
                                           Activation::kSigmoid),
                         [](const auto& p) { return std::string(ActivationName(p.param)); });

TEST_F(CudaModelTest, LeNetOnMnistShapesMatchesCpu) {
  Pair m = MakePair(CnnArchitecture{});
  ExpectMatchesCpu(m, MakeImages(16, 1, 28, 28, 4, 31).All(), 32);
}

// ---- Evaluate ---------------------------------------------------------------------------------

TEST_F(CudaModelTest, EvaluateInChunksAgreesWithCpu) {
  Pair m = MakePair(Mlp(12, {16}, Activation::kSigmoid, 3));
  const DenseData d = MakeBlobs(2 * kCudaEvalChunk + 300, 12, 3, 33);
  const std::vector<float> p = PerturbedParams(*m.cpu, 34);
  const EvalResult cpu = m.cpu->Evaluate(p, d.All());
  const EvalResult gpu = m.gpu->Evaluate(p, d.All());
  EXPECT_EQ(gpu.count, d.size());
  EXPECT_EQ(gpu.correct, cpu.correct);
  EXPECT_NEAR(gpu.loss_sum, cpu.loss_sum, 1e-5 * (1 + cpu.loss_sum));
  // The sum over two parts is the whole; an empty batch counts nothing.
  EvalResult parts = m.gpu->Evaluate(p, SliceBatch(d.All(), 0, 700));
  parts += m.gpu->Evaluate(p, SliceBatch(d.All(), 700, d.size() - 700));
  EXPECT_NEAR(parts.loss_sum, gpu.loss_sum, 1e-9 * (1 + gpu.loss_sum));
  EXPECT_EQ(parts.correct, gpu.correct);
  EXPECT_EQ(m.gpu->Evaluate(p, SliceBatch(d.All(), 0, 0)).count, 0);
}

// ---- Device-side entry points ------------------------------------------------------------------

TEST_F(CudaModelTest, DeviceEntryPointsMatchTheHostSpanPath) {
  auto model = NewCudaCnnModel(SmallCnn(Activation::kRelu), 0);
  auto& m = dynamic_cast<CudaModel&>(*model);
  const DenseData d = MakeImages(10, 2, 11, 13, 3, 35);
  const std::vector<float> p = PerturbedParams(*model, 36);
  const auto n = static_cast<int64_t>(p.size());
  const std::size_t bytes = p.size() * sizeof(float);
  std::vector<float> g_host(p.size());
  const float loss_host = model->LossAndGradient(p, d.All(), g_host);

  // A GPU worker's way: pull into the pinned buffer, copy up on the model's stream,
  // compute on the device, copy the gradient down through the pinned buffer.
  std::memcpy(m.pinned_params(), p.data(), bytes);
  ASGD_CUDA_CHECK(cudaMemcpyAsync(m.device_params(), m.pinned_params(), bytes,
                                  cudaMemcpyHostToDevice, m.stream()));
  const float loss_device =
      m.LossAndGradientDevice(m.device_params(), d.All(), m.device_grad(), m.stream());
  ASGD_CUDA_CHECK(
      cudaMemcpyAsync(m.pinned_grad(), m.device_grad(), bytes, cudaMemcpyDeviceToHost, m.stream()));
  ASGD_CUDA_CHECK(cudaStreamSynchronize(m.stream()));
  EXPECT_EQ(loss_device, loss_host);
  EXPECT_EQ(std::vector<float>(m.pinned_grad(), m.pinned_grad() + n), g_host);  // bitwise

  // The caller's own buffers and stream (cuBLAS may pick another kernel on another
  // stream's workspace, so not necessarily bitwise).
  auto d_params = ToDevice(p);
  DeviceBuffer<float> d_grad(n);
  const float loss_own = m.LossAndGradientDevice(d_params.get(), d.All(), d_grad.get(), stream());
  const std::vector<float> g_own = ToHost(d_grad);
  EXPECT_NEAR(loss_own, loss_host, 1e-6 * (1 + std::abs(loss_host)));
  const std::vector<double> a(g_own.begin(), g_own.end()), b(g_host.begin(), g_host.end());
  EXPECT_LT(RelativeError(a, b), 1e-6);
  const EvalResult eval = m.EvaluateDevice(d_params.get(), d.All(), stream());
  EXPECT_EQ(eval.correct, model->Evaluate(p, d.All()).correct);
  EXPECT_NEAR(eval.mean_loss(), loss_host, 1e-6 * (1 + std::abs(loss_host)));
}

// ---- Determinism, clones, sharing the device ---------------------------------------------------

TEST_F(CudaModelTest, SameInputsGiveBitwiseSameGradients) {
  auto model = NewCudaCnnModel(SmallCnn(Activation::kRelu), 0);
  const DenseData d = MakeImages(10, 2, 11, 13, 3, 37);
  const std::vector<float> p = PerturbedParams(*model, 38);
  std::vector<float> g1(p.size()), g2(p.size());
  const float l1 = model->LossAndGradient(p, d.All(), g1);
  const float l2 = model->LossAndGradient(p, d.All(), g2);
  EXPECT_EQ(std::memcmp(&l1, &l2, sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)), 0);
}

// LossAndGradientReporting: one range per layer, last layer first, each holding its final
// values when reported, with LossAndGradient's loss and gradient bits (as the CPU models).
TEST_F(CudaModelTest, ReportsEachLayerLastFirstWithTheSameBits) {
  auto mlp = NewCudaMlpModel(Mlp(10, {16, 8}, Activation::kRelu, 4), 0);
  EXPECT_TRUE(mlp->ReportsGradientByLayer());
  const std::vector<float> pm = PerturbedParams(*mlp, 62);
  const ParamLayout& lm = mlp->layout();
  EXPECT_EQ(models::testing::ExpectReportsAgree(*mlp, pm, MakeBlobs(40, 10, 4, 61).All()),
            (std::vector<Range>{models::testing::LayerRange(lm, "fc3"),
                                models::testing::LayerRange(lm, "fc2"),
                                models::testing::LayerRange(lm, "fc1")}));
  auto cnn = NewCudaCnnModel(SmallCnn(Activation::kRelu), 0);
  const std::vector<float> pc = PerturbedParams(*cnn, 66);
  const ParamLayout& lc = cnn->layout();
  EXPECT_EQ(
      models::testing::ExpectReportsAgree(*cnn, pc, MakeImages(12, 2, 11, 13, 3, 65).All()),
      (std::vector<Range>{
          models::testing::LayerRange(lc, "fc2"), models::testing::LayerRange(lc, "fc1"),
          models::testing::LayerRange(lc, "conv2"), models::testing::LayerRange(lc, "conv1")}));
}

TEST_F(CudaModelTest, CloneIsIndependentOfTheOriginal) {
  auto model = NewCudaMlpModel(Mlp(10, {16, 8}, Activation::kTanh, 4), 0);
  const DenseData d = MakeBlobs(100, 10, 4, 39);
  const std::vector<float> p = PerturbedParams(*model, 40);
  std::vector<float> g(p.size()), g_clone(p.size()), g_again(p.size()), scratch(p.size());
  const float loss = model->LossAndGradient(p, d.View(0, 8), g);
  auto clone = model->Clone();
  EXPECT_EQ(clone->Describe(), model->Describe());
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

TEST_F(CudaModelTest, InstancesShareTheDeviceConcurrently) {
  // Four workers' models on one GPU, each in its own thread with its own stream and
  // cuBLAS handle, against the result of one model alone.
  auto model = NewCudaCnnModel(SmallCnn(Activation::kRelu), 0);
  const DenseData d = MakeImages(64, 2, 11, 13, 3, 41);
  const std::vector<float> p = PerturbedParams(*model, 42);
  std::vector<float> expected(p.size());
  const float expected_loss = model->LossAndGradient(p, d.All(), expected);
  constexpr int kWorkers = 4;
  std::vector<std::unique_ptr<Model>> clones;
  for (int i = 0; i < kWorkers; ++i) clones.push_back(model->Clone());
  std::vector<std::vector<float>> grads(kWorkers, std::vector<float>(p.size()));
  std::vector<float> losses(kWorkers);
  std::vector<std::string> errors(kWorkers);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWorkers; ++i) {
    threads.emplace_back([&, i] {
      const auto w = static_cast<std::size_t>(i);
      try {
        for (int rep = 0; rep < 20; ++rep) {
          losses[w] = clones[w]->LossAndGradient(p, d.All(), grads[w]);
        }
      } catch (const std::exception& e) {
        errors[w] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kWorkers; ++i) {
    const auto w = static_cast<std::size_t>(i);
    EXPECT_EQ(errors[w], "") << "worker " << i;
    EXPECT_EQ(losses[w], expected_loss) << "worker " << i;
    EXPECT_EQ(grads[w], expected) << "worker " << i;
  }
}

// ---- Argument checks ---------------------------------------------------------------------------

TEST_F(CudaModelTest, BadArgumentsThrowInvariantError) {
  auto mlp = NewCudaMlpModel(Mlp(4, {3}, Activation::kRelu, 2), 0);
  auto& m = dynamic_cast<CudaModel&>(*mlp);
  const DenseData d = MakeBlobs(4, 4, 2, 43);
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
  EXPECT_THROW(mlp->Evaluate(p, bad_label.All()), InvariantError);
  EXPECT_THROW(
      m.LossAndGradientDevice(m.device_params(), bad_label.All(), m.device_grad(), m.stream()),
      InvariantError);
  datasets::BatchView sparse = d.All();
  sparse.x = nullptr;
  EXPECT_THROW(mlp->LossAndGradient(p, sparse, g), InvariantError);
  // The model still works after refusing.
  EXPECT_TRUE(std::isfinite(mlp->LossAndGradient(p, d.All(), g)));
}

// ---- Training ---------------------------------------------------------------------------------

struct TrainResult {
  double initial_loss, final_loss, accuracy;
};

// Plain SGD on the host vector, as models_test's Train.
TrainResult Train(Model& model, const DenseData& data, int64_t batch, int steps, float lr) {
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

TEST_F(CudaModelTest, TrainingReachesTheCpuLoss) {
  const DenseData blobs = MakeBlobs(512, 20, 4, 52, 1.0, 0.5);
  const DenseData images = MakeImages(256, 1, 12, 12, 4, 53);
  CnnArchitecture cnn;
  cnn.height = cnn.width = 12;
  cnn.channels = {4, 8};
  cnn.fc = {16};
  cnn.kernel = 3;
  cnn.classes = 4;
  struct Case {
    Pair models;
    const DenseData* data;
    float lr;
  };
  std::vector<Case> cases;
  cases.push_back({MakePair(Mlp(20, {}, Activation::kRelu, 4)), &blobs, 0.1f});
  cases.push_back({MakePair(Mlp(20, {32, 32}, Activation::kRelu, 4)), &blobs, 0.1f});
  cases.push_back({MakePair(Mlp(20, {32}, Activation::kTanh, 4)), &blobs, 0.1f});
  cases.push_back({MakePair(cnn), &images, 0.1f});
  constexpr int kSteps = 300;
  for (Case& c : cases) {
    const std::string what = c.models.gpu->Describe();
    const TrainResult cpu = Train(*c.models.cpu, *c.data, 32, kSteps, c.lr);
    const TrainResult gpu = Train(*c.models.gpu, *c.data, 32, kSteps, c.lr);
    EXPECT_NEAR(gpu.initial_loss, cpu.initial_loss, 1e-5 * (1 + cpu.initial_loss)) << what;
    EXPECT_NEAR(gpu.final_loss, cpu.final_loss, 0.01 * cpu.final_loss + 1e-3) << what;
    EXPECT_NEAR(gpu.accuracy, cpu.accuracy, 0.01) << what;
    EXPECT_LT(gpu.final_loss, 0.5 * gpu.initial_loss) << what;
    RecordProperty(c.models.gpu->Name() + "_final_loss_gpu_vs_cpu",
                   std::to_string(gpu.final_loss) + " vs " + std::to_string(cpu.final_loss));
  }
}

}  // namespace
}  // namespace asgd::models::cuda
