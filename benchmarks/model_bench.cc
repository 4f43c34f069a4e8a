// Forward + backward throughput of the CPU models, and how close each comes to its bare
// matrix products.
//
// BM_Step/<model>/<batch> times one LossAndGradient call per iteration (the reported
// time, via manual timing) and, in the same iteration right after it, the same sequence
// of Eigen GEMMs on buffers of the same shapes with nothing else (no bias, activation,
// softmax, im2col, pooling, allocation or checks). Counters:
//   samples_per_s  examples per second through LossAndGradient (rate over model time)
//   ratio          model time / bare-GEMM time, summed over the same iterations
//   bare_ms        bare GEMM time per iteration
//   bare_gflops    the GEMMs' arithmetic rate
// The MLP 784-256-256-10 runs 3 forward GEMMs, 3 weight-gradient GEMMs and 2
// input-gradient GEMMs (none for the first layer). For logreg, which has no GEMM, the
// reference is the bare sparse work: one CSR dot product per example and one scatter of
// its gradient.
//
//   model_bench --benchmark_min_time=0.3 --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/rng.h"
#include "datasets/dataset.h"
#include "models/eigen.h"
#include "models/factory.h"
#include "models/model.h"

namespace asgd::models {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Map = Eigen::Map<RowMatrix>;
using ConstMap = Eigen::Map<const RowMatrix>;

// One GEMM C = op(A)·op(B), written exactly as the models write it.
struct Gemm {
  enum Kind { kNN, kTN, kNT };  // A·B, Aᵀ·B, A·Bᵀ
  Kind kind;
  int64_t m, n, k;  // C is m × n, inner dimension k
  const float* a;
  const float* b;
  float* c;

  void Run() const {
    Map out(c, m, n);
    switch (kind) {
      case kNN:
        out.noalias() = ConstMap(a, m, k) * ConstMap(b, k, n);
        break;
      case kTN:
        out.noalias() = ConstMap(a, k, m).transpose() * ConstMap(b, k, n);
        break;
      case kNT:
        out.noalias() = ConstMap(a, m, k) * ConstMap(b, n, k).transpose();
        break;
    }
  }
  double Flops() const { return 2.0 * static_cast<double>(m * n * k); }
};

// The bare work of one model step.
class Reference {
 public:
  virtual ~Reference() = default;
  virtual void Run() = 0;
  virtual double Flops() const = 0;
};

// A GEMM sequence whose buffers are chained as in the model (a layer's output is the
// next layer's input, its weights serve forward and backward), so the reference gets the
// same cache reuse as the model.
class GemmReference final : public Reference {
 public:
  // A new buffer of n random floats, alive as long as the reference.
  float* Buffer(int64_t n) {
    buffers_.push_back(std::make_unique<std::vector<float>>(static_cast<std::size_t>(n)));
    for (float& x : *buffers_.back()) x = static_cast<float>(rng_.Uniform(-1, 1));
    return buffers_.back()->data();
  }
  void Add(Gemm::Kind kind, int64_t m, int64_t n, int64_t k, const float* a, const float* b,
           float* c) {
    gemms_.push_back({kind, m, n, k, a, b, c});
  }
  // A fully connected stack dims[0] → … → dims.back() on `batch` rows with input x:
  // forward h_l = h_{l−1}·W_l; backward dW_l = h_{l−1}ᵀ·dz_l, and dz_{l−1} = dz_l·W_lᵀ for
  // every layer but the first; dx = dz_1·W_1ᵀ too when dx is not null.
  void AddDenseStack(const std::vector<int64_t>& dims, int64_t batch, const float* x, float* dx) {
    const std::size_t layers = dims.size() - 1;
    std::vector<float*> w(layers + 1), dw(layers + 1), h(layers + 1), d(layers + 1);
    for (std::size_t l = 1; l <= layers; ++l) {
      w[l] = Buffer(dims[l - 1] * dims[l]);
      dw[l] = Buffer(dims[l - 1] * dims[l]);
      h[l] = Buffer(batch * dims[l]);
      d[l] = Buffer(batch * dims[l]);
    }
    const float* in = x;
    for (std::size_t l = 1; l <= layers; ++l) {
      Add(Gemm::kNN, batch, dims[l], dims[l - 1], in, w[l], h[l]);
      in = h[l];
    }
    for (std::size_t l = layers; l >= 1; --l) {
      Add(Gemm::kTN, dims[l - 1], dims[l], batch, l > 1 ? h[l - 1] : x, d[l], dw[l]);
      float* d_in = l > 1 ? d[l - 1] : dx;
      if (d_in != nullptr) Add(Gemm::kNT, batch, dims[l - 1], dims[l], d[l], w[l], d_in);
    }
  }
  void Run() override {
    for (const Gemm& g : gemms_) g.Run();
  }
  double Flops() const override {
    double f = 0;
    for (const Gemm& g : gemms_) f += g.Flops();
    return f;
  }

 private:
  Rng rng_{7};
  std::vector<std::unique_ptr<std::vector<float>>> buffers_;
  std::vector<Gemm> gemms_;
};

// CSR dot products and gradient scatter, as sparse logistic regression needs at least.
class SparseReference final : public Reference {
 public:
  SparseReference(const datasets::BatchView& batch, int64_t features)
      : batch_(batch), w_(static_cast<std::size_t>(features), 0.01f),
        g_(static_cast<std::size_t>(features)), z_(static_cast<std::size_t>(batch.size)) {}
  void Run() override {
    for (int64_t r = 0; r < batch_.size; ++r) {
      float acc = 0;
      for (int64_t k = batch_.indptr[r]; k < batch_.indptr[r + 1]; ++k) {
        acc += w_[static_cast<std::size_t>(batch_.indices[k])] * batch_.values[k];
      }
      z_[static_cast<std::size_t>(r)] = acc;
    }
    std::fill(g_.begin(), g_.end(), 0.0f);
    for (int64_t r = 0; r < batch_.size; ++r) {
      const float d = z_[static_cast<std::size_t>(r)];
      for (int64_t k = batch_.indptr[r]; k < batch_.indptr[r + 1]; ++k) {
        g_[static_cast<std::size_t>(batch_.indices[k])] += d * batch_.values[k];
      }
    }
    benchmark::DoNotOptimize(g_.data());
  }
  double Flops() const override {
    return 4.0 * static_cast<double>(batch_.indptr[batch_.size] - batch_.indptr[0]);
  }

 private:
  datasets::BatchView batch_;
  std::vector<float> w_, g_, z_;
};

// Synthetic inputs of the right shapes: MNIST-like images in [0, 1], or a9a-like sparse
// rows with 14 of 123 features set to 1.
struct Inputs {
  std::vector<float> x;
  std::vector<int64_t> indptr{0};
  std::vector<int32_t> indices;
  std::vector<float> values;
  std::vector<int32_t> labels;
  datasets::BatchView view;
};

Inputs MakeInputs(const InputSpec& spec, int64_t batch) {
  Rng rng(11);
  Inputs in;
  for (int64_t r = 0; r < batch; ++r) {
    in.labels.push_back(static_cast<int32_t>(rng.UniformInt(static_cast<uint64_t>(spec.num_classes))));
    if (spec.sparse) {
      std::vector<int32_t> all(static_cast<std::size_t>(spec.num_features));
      for (std::size_t j = 0; j < all.size(); ++j) all[j] = static_cast<int32_t>(j);
      rng.Shuffle(std::span<int32_t>(all));
      std::vector<int32_t> row(all.begin(), all.begin() + 14);
      std::sort(row.begin(), row.end());
      for (int32_t j : row) {
        in.indices.push_back(j);
        in.values.push_back(1.0f);
      }
      in.indptr.push_back(static_cast<int64_t>(in.indices.size()));
    } else {
      for (int64_t f = 0; f < spec.num_features; ++f) {
        in.x.push_back(static_cast<float>(rng.Uniform()));
      }
    }
  }
  in.view.size = batch;
  in.view.num_features = spec.num_features;
  in.view.labels = in.labels.data();
  if (spec.sparse) {
    in.view.indptr = in.indptr.data();
    in.view.indices = in.indices.data();
    in.view.values = in.values.data();
  } else {
    in.view.x = in.x.data();
  }
  return in;
}

std::unique_ptr<Reference> MakeReference(const std::string& name, const Inputs& in,
                                         int64_t batch) {
  if (name == "logreg") return std::make_unique<SparseReference>(in.view, 123);
  auto ref = std::make_unique<GemmReference>();
  if (name == "softmax") ref->AddDenseStack({784, 10}, batch, in.x.data(), nullptr);
  if (name == "mlp") ref->AddDenseStack({784, 256, 256, 10}, batch, in.x.data(), nullptr);
  if (name == "cnn") {
    // LeNet-5 on 1×28×28: conv1 [6, 25]·cols1 [25, B·784]; conv2 [16, 150]·cols2
    // [150, B·100]; fc 400-120-84-10 with the input gradient of fc1 (it flows back into
    // the convolutions); then the convolutions' weight gradients and conv2's dcols.
    const int64_t n1 = batch * 784, n2 = batch * 100;
    float* cols1 = ref->Buffer(25 * n1);
    float* w1 = ref->Buffer(6 * 25);
    float* out1 = ref->Buffer(6 * n1);
    float* cols2 = ref->Buffer(150 * n2);
    float* w2 = ref->Buffer(16 * 150);
    float* out2 = ref->Buffer(16 * n2);
    ref->Add(Gemm::kNN, 6, n1, 25, w1, cols1, out1);
    ref->Add(Gemm::kNN, 16, n2, 150, w2, cols2, out2);
    ref->AddDenseStack({400, 120, 84, 10}, batch, ref->Buffer(batch * 400),
                       ref->Buffer(batch * 400));
    float* dz2 = ref->Buffer(16 * n2);
    float* dz1 = ref->Buffer(6 * n1);
    ref->Add(Gemm::kNT, 16, 150, n2, dz2, cols2, ref->Buffer(16 * 150));  // dW2 = dZ2·cols2ᵀ
    ref->Add(Gemm::kTN, 150, n2, 16, w2, dz2, ref->Buffer(150 * n2));    // dcols2 = W2ᵀ·dZ2
    ref->Add(Gemm::kNT, 6, 25, n1, dz1, cols1, ref->Buffer(6 * 25));      // dW1 = dZ1·cols1ᵀ
  }
  return ref;
}

void BM_Step(benchmark::State& state, const std::string& name) {
  const int64_t batch = state.range(0);
  const InputSpec spec = name == "logreg" ? InputSpec{{123}, 123, 2, true}
                                          : InputSpec{{1, 28, 28}, 784, 10, false};
  ModelOptions options;
  options.name = name;  // defaults: mlp 784-256-256-10 relu, LeNet-5 cnn
  std::unique_ptr<Model> model = NewModel(options, spec);
  std::vector<float> params(static_cast<std::size_t>(model->layout().size()));
  std::vector<float> grad(params.size());
  model->Initialize(params, 1);
  const Inputs in = MakeInputs(spec, batch);
  std::unique_ptr<Reference> ref = MakeReference(name, in, batch);
  // Warm up both (scratch allocation, caches).
  model->LossAndGradient(params, in.view, grad);
  ref->Run();

  using Clock = std::chrono::steady_clock;
  double model_s = 0, bare_s = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    float loss = model->LossAndGradient(params, in.view, grad);
    benchmark::DoNotOptimize(loss);
    benchmark::ClobberMemory();
    const auto t1 = Clock::now();
    ref->Run();
    benchmark::ClobberMemory();
    const auto t2 = Clock::now();
    const double step = std::chrono::duration<double>(t1 - t0).count();
    model_s += step;
    bare_s += std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(step);
  }
  const auto iters = static_cast<double>(state.iterations());
  state.counters["samples_per_s"] =
      benchmark::Counter(static_cast<double>(batch) * iters, benchmark::Counter::kIsRate);
  state.counters["ratio"] = model_s / bare_s;
  state.counters["bare_ms"] = 1e3 * bare_s / iters;
  state.counters["bare_gflops"] = ref->Flops() * iters / bare_s / 1e9;
  state.SetLabel(model->Describe());
}

void Register() {
  for (const char* name : {"softmax", "mlp", "cnn", "logreg"}) {
    benchmark::RegisterBenchmark((std::string("BM_Step/") + name).c_str(), BM_Step,
                                 std::string(name))
        ->Arg(32)
        ->Arg(128)
        ->Arg(512)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace
}  // namespace asgd::models

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  asgd::models::Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
