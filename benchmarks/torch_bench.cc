// One training step of the MNIST MLP (784-256-256-10, ReLU) three ways, at batch 32 and 128:
//
//   BM_EigenMlpStep/<B>        asgd's own CPU MLP: LossAndGradient
//   BM_TorchScriptStep/<B>     the same network as a TorchScript module behind asgd's Model
//                              interface (models/torch/): LossAndGradient, parameters and
//                              gradient in asgd's flat buffers
//   BM_BareLibtorchStep/<B>    the same module driven by libtorch directly, as a PyTorch
//                              user would: zero the gradients, forward, cross-entropy,
//                              backward
//
// The goals (issue 31): TorchScript ≤ 1.3× Eigen, and ≤ 1.05× bare libtorch (the backend
// adds nothing measurable). The module is defined here in TorchScript source (no Python
// needed) and saved to a temporary file that the backend loads. Threads: one for libtorch
// and OpenBLAS (LimitTorchThreads), as in a run.
//
//   torch_bench --benchmark_min_time=1 --benchmark_repetitions=3
//               --benchmark_report_aggregates_only=true   (one line)
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <torch/script.h>
#include <unistd.h>

#include "datasets/synthetic.h"
#include "models/factory.h"
#include "models/torch/torchscript_model.h"

namespace asgd::models {
namespace {

struct Problem {
  datasets::TrainTest data;
  InputSpec input;
  std::string file;
  std::unique_ptr<Model> eigen;
  std::unique_ptr<Model> torch_model;

  Problem() {
    datasets::SyntheticOptions so;
    so.num_train = 256;
    so.num_test = 16;
    so.num_features = 784;
    so.num_classes = 10;
    data = datasets::MakeSynthetic(so);
    input.example_shape = {784};
    input.num_features = 784;
    input.num_classes = 10;
    eigen = NewModel(ModelOptions{}, input);  // mlp 784-256-256-10 relu
    // The same network in TorchScript, PyTorch's Linear layout (weight [out, in]).
    torch::jit::Module m("Mlp");
    const std::vector<std::pair<int64_t, int64_t>> layers = {{784, 256}, {256, 256}, {256, 10}};
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const auto [in, out] = layers[l];
      const std::string name = "fc" + std::to_string(l + 1);
      // requires_grad as torch.nn.Parameter has it: the bare baseline's backward needs it.
      m.register_parameter(
          name + "_weight",
          (torch::randn({out, in}) * (1.0 / std::sqrt(in))).set_requires_grad(true), false);
      m.register_parameter(name + "_bias", torch::zeros({out}).set_requires_grad(true), false);
    }
    m.define(R"(
def forward(self, x):
    h = torch.relu(torch.linear(x, self.fc1_weight, self.fc1_bias))
    h = torch.relu(torch.linear(h, self.fc2_weight, self.fc2_bias))
    return torch.linear(h, self.fc3_weight, self.fc3_bias)
)");
    file = "/tmp/asgd_torch_bench_" + std::to_string(getpid()) + ".pt";
    m.save(file);
    TorchScriptOptions options;
    options.file = file;
    torch_model = NewTorchScriptModel(options, input);  // also limits the threads
  }
  ~Problem() { unlink(file.c_str()); }

  datasets::BatchView Batch(int64_t size) const {
    datasets::BatchView b;
    b.size = size;
    b.num_features = 784;
    b.x = data.train.dense.data();
    b.labels = data.train.labels.data();
    return b;
  }
};

Problem& P() {
  static Problem* p = new Problem();
  return *p;
}

void Step(benchmark::State& state, Model& model) {
  const datasets::BatchView batch = P().Batch(state.range(0));
  std::vector<float> params(static_cast<std::size_t>(model.layout().size()));
  std::vector<float> grad(params.size());
  model.Initialize(params, 1);
  for (auto _ : state) {
    benchmark::DoNotOptimize(model.LossAndGradient(params, batch, grad));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * batch.size);
}

void BM_EigenMlpStep(benchmark::State& state) { Step(state, *P().eigen); }
void BM_TorchScriptStep(benchmark::State& state) { Step(state, *P().torch_model); }

void BM_BareLibtorchStep(benchmark::State& state) {
  Problem& p = P();
  const int64_t b = state.range(0);
  torch::jit::Module m = torch::jit::load(p.file);
  m.train();
  std::vector<int64_t> labels(p.data.train.labels.begin(), p.data.train.labels.begin() + b);
  const at::Tensor x =
      at::from_blob(const_cast<float*>(p.data.train.dense.data()), {b, 784}, at::kFloat);
  const at::Tensor y = at::from_blob(labels.data(), {b}, at::kLong);
  std::vector<at::Tensor> params;
  for (const at::Tensor& t : m.parameters()) params.push_back(t);
  for (auto _ : state) {
    for (at::Tensor& t : params) {
      if (t.grad().defined()) t.mutable_grad().zero_();
    }
    const at::Tensor loss = at::cross_entropy_loss(m.forward({x}).toTensor(), y);
    loss.backward();
    benchmark::DoNotOptimize(loss.item<float>());
  }
  state.SetItemsProcessed(state.iterations() * b);
}

BENCHMARK(BM_EigenMlpStep)->Arg(32)->Arg(128)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TorchScriptStep)->Arg(32)->Arg(128)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_BareLibtorchStep)->Arg(32)->Arg(128)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace asgd::models

BENCHMARK_MAIN();
