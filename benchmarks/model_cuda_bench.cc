// Forward + backward throughput of the CUDA models against bare cuBLAS SGEMMs of the
// same shapes measured in the same run, and the host↔device bandwidth that bounds a GPU
// worker's pushes and pulls. Without a usable CUDA device it prints one line saying why
// and exits 0.
//
// BM_CudaStep/<model>/<batch>: one LossAndGradientDevice call per iteration with the
// parameters resident on the device (a GPU worker's step: batch upload through pinned
// staging, forward, loss, backward; it returns when the gradient is complete), then in
// the same iteration the model's GEMM sequence alone on buffers of the same shapes
// (cuBLAS, one stream, synchronised). BM_CudaStepHostSpans/<model>/<batch> is the same
// through the Model interface: parameters up and the gradient down through pinned
// buffers every step. Counters:
//   samples_per_s  examples per second through the model (rate over model time)
//   ratio          model time / bare-GEMM time, summed over the same iterations
//   bare_ms        bare GEMM time per iteration
//   bare_gflops    the GEMMs' arithmetic rate
// Models: softmax 784-10, mlp 784-256-256-10, mlp_wide 784-1024-1024-10, cnn (LeNet-5 on
// 1×28×28), at batch 128, 512 and 2048.
//
// BM_ParamCopy/<h2d|d2h>/<pinned|pageable>/<floats>: one copy of an MLP parameter vector
// (784-256-256-10: 269322 floats; 784-1024-1024-10: 1863690 floats) per iteration;
// bytes_per_second is the bandwidth a push (d2h) or pull (h2d) can reach.
//
// BM_GpuWorkerExchange/<floats>/<shards>: a GPU worker's push and pull of a device-resident
// parameter vector through inproc shard servers (add rule): gradient device → pinned
// host, push; pull into pinned host, → device. In the same iteration, the parts on their
// own: the two pinned copies alone, and the same push + pull from host memory. Counters:
//   ratio     (pinned copies + host push/pull) / GPU worker exchange: the goal is
//             >= 0.7 (the exchange costs at most 1/0.7 of its parts)
//   copy_ms, host_ms, exchange_ms  per iteration
//
//   model_cuda_bench --benchmark_min_time=0.5 --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/param_layout.h"
#include "core/rng.h"
#include "datasets/dataset.h"
#include "models/architecture.h"
#include "models/cuda/cuda_check.h"
#include "models/cuda/cuda_model.h"
#include "models/cuda/device_memory.h"
#include "models/cuda/factory.h"
#include "models/cuda/gemm.h"
#include "models/device.h"
#include "ps/placement.h"
#include "ps/server_rule.h"
#include "transport/context.h"
#include "transport/ps_client.h"
#include "transport/shard_server.h"

namespace asgd::models::cuda {
namespace {

using Clock = std::chrono::steady_clock;

struct Gemm {
  Op op_a, op_b;
  int64_t m, n, k;
  const float* a;
  const float* b;
  float* c;
  double Flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

// The GEMMs of one model step on device buffers chained as in the model (a layer's
// output is the next layer's input), on their own stream and handle.
class GemmReference {
 public:
  GemmReference() { handle_.Bind(stream_.get()); }

  float* Buffer(int64_t n) {
    buffers_.emplace_back(n);
    ASGD_CUDA_CHECK(cudaMemset(buffers_.back().get(), 0, buffers_.back().bytes()));
    return buffers_.back().get();
  }
  void Add(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, const float* a, const float* b,
           float* c) {
    gemms_.push_back({op_a, op_b, m, n, k, a, b, c});
  }
  // dims[0] → … → dims.back() on `batch` rows: forward h_l = h_{l−1}·W_l; backward
  // dW_l = h_{l−1}ᵀ·dz_l and dz_{l−1} = dz_l·W_lᵀ for every layer but the first, and for
  // the first too when dx is not null.
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
      Add(Op::kN, Op::kN, batch, dims[l], dims[l - 1], in, w[l], h[l]);
      in = h[l];
    }
    for (std::size_t l = layers; l >= 1; --l) {
      Add(Op::kT, Op::kN, dims[l - 1], dims[l], batch, l > 1 ? h[l - 1] : x, d[l], dw[l]);
      float* d_in = l > 1 ? d[l - 1] : dx;
      if (d_in != nullptr) Add(Op::kN, Op::kT, batch, dims[l - 1], dims[l], d[l], w[l], d_in);
    }
  }
  void Run() {
    for (const Gemm& g : gemms_) RowMajorGemm(handle_.get(), g.op_a, g.op_b, g.m, g.n, g.k, g.a, g.b, g.c);
    ASGD_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  }
  double Flops() const {
    double f = 0;
    for (const Gemm& g : gemms_) f += g.Flops();
    return f;
  }

 private:
  OwnedStream stream_;
  CublasHandle handle_;
  std::vector<DeviceBuffer<float>> buffers_;
  std::vector<Gemm> gemms_;
};

struct ModelCase {
  const char* name;
  std::vector<int64_t> dims;  // dense: inputs, hidden…, classes; empty for the cnn
};

std::vector<ModelCase> Cases() {
  return {{"softmax", {784, 10}},
          {"mlp", {784, 256, 256, 10}},
          {"mlp_wide", {784, 1024, 1024, 10}},
          {"cnn", {}}};
}

std::unique_ptr<Model> MakeModel(const ModelCase& c) {
  if (c.dims.empty()) return NewCudaCnnModel(CnnArchitecture{}, 0);
  MlpArchitecture arch;
  arch.inputs = c.dims.front();
  arch.hidden.assign(c.dims.begin() + 1, c.dims.end() - 1);
  arch.classes = static_cast<int>(c.dims.back());
  return NewCudaMlpModel(arch, 0);
}

std::unique_ptr<GemmReference> MakeReference(const ModelCase& c, int64_t batch) {
  auto ref = std::make_unique<GemmReference>();
  float* x = ref->Buffer(batch * 784);
  if (!c.dims.empty()) {
    ref->AddDenseStack(c.dims, batch, x, nullptr);
    return ref;
  }
  // LeNet-5 on 1×28×28: conv1 [6, 25]·cols1 [25, B·784]; conv2 [16, 150]·cols2 [150, B·100];
  // fc 400-120-84-10 with the input gradient of fc1; the convolutions' weight gradients
  // and conv2's dcols.
  const int64_t n1 = batch * 784, n2 = batch * 100;
  float* cols1 = ref->Buffer(25 * n1);
  float* w1 = ref->Buffer(6 * 25);
  float* out1 = ref->Buffer(6 * n1);
  float* cols2 = ref->Buffer(150 * n2);
  float* w2 = ref->Buffer(16 * 150);
  float* out2 = ref->Buffer(16 * n2);
  ref->Add(Op::kN, Op::kN, 6, n1, 25, w1, cols1, out1);
  ref->Add(Op::kN, Op::kN, 16, n2, 150, w2, cols2, out2);
  ref->AddDenseStack({400, 120, 84, 10}, batch, ref->Buffer(batch * 400), ref->Buffer(batch * 400));
  float* dz2 = ref->Buffer(16 * n2);
  float* dz1 = ref->Buffer(6 * n1);
  ref->Add(Op::kN, Op::kT, 16, 150, n2, dz2, cols2, ref->Buffer(16 * 150));  // dW2
  ref->Add(Op::kT, Op::kN, 150, n2, 16, w2, dz2, ref->Buffer(150 * n2));     // dcols2
  ref->Add(Op::kN, Op::kT, 6, 25, n1, dz1, cols1, ref->Buffer(6 * 25));      // dW1
  return ref;
}

// MNIST-shaped random inputs in [0, 1] with labels in [0, 10).
struct Inputs {
  std::vector<float> x;
  std::vector<int32_t> labels;
  datasets::BatchView view;
};

Inputs MakeInputs(int64_t batch) {
  Rng rng(11);
  Inputs in;
  in.x.resize(static_cast<std::size_t>(batch * 784));
  for (float& v : in.x) v = static_cast<float>(rng.Uniform());
  for (int64_t r = 0; r < batch; ++r) in.labels.push_back(static_cast<int32_t>(rng.UniformInt(10)));
  in.view.size = batch;
  in.view.num_features = 784;
  in.view.x = in.x.data();
  in.view.labels = in.labels.data();
  return in;
}

void BM_CudaStep(benchmark::State& state, const ModelCase& c, bool host_spans) {
  const int64_t batch = state.range(0);
  std::unique_ptr<Model> model = MakeModel(c);
  auto& m = dynamic_cast<CudaModel&>(*model);
  std::vector<float> params(static_cast<std::size_t>(model->layout().size()));
  std::vector<float> grad(params.size());
  model->Initialize(params, 1);
  ASGD_CUDA_CHECK(cudaMemcpy(m.device_params(), params.data(), params.size() * sizeof(float),
                             cudaMemcpyHostToDevice));
  const Inputs in = MakeInputs(batch);
  std::unique_ptr<GemmReference> ref = MakeReference(c, batch);
  auto step = [&] {
    return host_spans ? model->LossAndGradient(params, in.view, grad)
                      : m.LossAndGradientDevice(m.device_params(), in.view, m.device_grad(),
                                                m.stream());
  };
  // Warm up both (scratch allocation, cuBLAS kernel selection).
  step();
  ref->Run();

  double model_s = 0, bare_s = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    float loss = step();
    benchmark::DoNotOptimize(loss);
    const auto t1 = Clock::now();
    ref->Run();
    const auto t2 = Clock::now();
    const double s = std::chrono::duration<double>(t1 - t0).count();
    model_s += s;
    bare_s += std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(s);
  }
  const auto iters = static_cast<double>(state.iterations());
  state.counters["samples_per_s"] =
      benchmark::Counter(static_cast<double>(batch) * iters, benchmark::Counter::kIsRate);
  state.counters["ratio"] = model_s / bare_s;
  state.counters["bare_ms"] = 1e3 * bare_s / iters;
  state.counters["bare_gflops"] = ref->Flops() * iters / bare_s / 1e9;
  state.SetLabel(model->Describe());
}

// state.range(0): floats; h2d: host → device (a pull), else device → host (a push).
void BM_ParamCopy(benchmark::State& state, bool h2d, bool pinned) {
  const int64_t n = state.range(0);
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  DeviceBuffer<float> device(n);
  PinnedBuffer<float> pinned_host(pinned ? n : 0);
  std::vector<float> pageable(pinned ? 0 : static_cast<std::size_t>(n), 1.0f);
  float* host = pinned ? pinned_host.get() : pageable.data();
  if (pinned) std::fill(host, host + n, 1.0f);
  OwnedStream stream;
  auto copy = [&] {
    ASGD_CUDA_CHECK(h2d ? cudaMemcpyAsync(device.get(), host, bytes, cudaMemcpyHostToDevice, stream.get())
                        : cudaMemcpyAsync(host, device.get(), bytes, cudaMemcpyDeviceToHost, stream.get()));
    ASGD_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  };
  copy();
  for (auto _ : state) {
    const auto t0 = Clock::now();
    copy();
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

// state.range(0): floats; state.range(1): shards.
void BM_GpuWorkerExchange(benchmark::State& state) {
  namespace tp = ::asgd::transport;
  const int64_t n = state.range(0);
  const int shards = static_cast<int>(state.range(1));
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  ParamLayout layout;
  layout.Add("params", {n});
  ps::PlacementOptions po;
  po.policy = ps::PlacementPolicy::kEvenSplit;
  const ps::Placement placement = ps::Placement::Build(layout, shards, po);
  auto context = tp::NewContext();
  const std::vector<float> initial(static_cast<std::size_t>(n), 0.0f);
  static int unique = 0;
  const int tag = unique++;
  auto servers = tp::StartShardServers(
      context, placement, initial, [](uint32_t) { return ps::NewAddRule(); },
      [&](int s) {
        return "inproc://gpu-exchange-" + std::to_string(tag) + "-" + std::to_string(s);
      });
  tp::ClientOptions co;
  co.timeout = std::chrono::seconds(30);
  tp::PsClient client(context, tp::Endpoints(servers), placement, co);

  DeviceBuffer<float> d_params(n), d_grad(n);
  ASGD_CUDA_CHECK(cudaMemset(d_grad.get(), 0, bytes));
  PinnedBuffer<float> pinned_params(n), pinned_grad(n);
  std::vector<float> host_params(static_cast<std::size_t>(n)), host_grad(static_cast<std::size_t>(n), 0.0f);
  OwnedStream stream;
  auto check = [&](const ps::Status& st) {
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  };
  auto exchange = [&] {
    ASGD_CUDA_CHECK(cudaMemcpyAsync(pinned_grad.get(), d_grad.get(), bytes, cudaMemcpyDeviceToHost, stream.get()));
    ASGD_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    check(client.Push(std::span<const float>(pinned_grad.get(), static_cast<std::size_t>(n))).Wait());
    check(client.Pull(std::span<float>(pinned_params.get(), static_cast<std::size_t>(n))).Wait());
    ASGD_CUDA_CHECK(cudaMemcpyAsync(d_params.get(), pinned_params.get(), bytes, cudaMemcpyHostToDevice, stream.get()));
    ASGD_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  };
  auto copies = [&] {
    ASGD_CUDA_CHECK(cudaMemcpyAsync(pinned_grad.get(), d_grad.get(), bytes, cudaMemcpyDeviceToHost, stream.get()));
    ASGD_CUDA_CHECK(cudaMemcpyAsync(d_params.get(), pinned_params.get(), bytes, cudaMemcpyHostToDevice, stream.get()));
    ASGD_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  };
  auto host = [&] {
    check(client.Push(host_grad).Wait());
    check(client.Pull(host_params).Wait());
  };
  exchange();
  copies();
  host();
  double exchange_s = 0, copy_s = 0, host_s = 0;
  auto timed = [](const auto& f) {
    const auto t0 = Clock::now();
    f();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  for (auto _ : state) {
    const double e = timed(exchange);
    exchange_s += e;
    copy_s += timed(copies);
    host_s += timed(host);
    state.SetIterationTime(e);
  }
  const auto iters = static_cast<double>(state.iterations());
  state.counters["ratio"] = (copy_s + host_s) / exchange_s;
  state.counters["exchange_ms"] = 1e3 * exchange_s / iters;
  state.counters["copy_ms"] = 1e3 * copy_s / iters;
  state.counters["host_ms"] = 1e3 * host_s / iters;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * static_cast<int64_t>(bytes));
}

void Register() {
  for (const ModelCase& c : Cases()) {
    for (bool host_spans : {false, true}) {
      const std::string name =
          std::string(host_spans ? "BM_CudaStepHostSpans/" : "BM_CudaStep/") + c.name;
      benchmark::RegisterBenchmark(name.c_str(), BM_CudaStep, c, host_spans)
          ->Arg(128)
          ->Arg(512)
          ->Arg(2048)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  for (bool h2d : {true, false}) {
    for (bool pinned : {true, false}) {
      const std::string name = std::string("BM_ParamCopy/") + (h2d ? "h2d/" : "d2h/") +
                               (pinned ? "pinned" : "pageable");
      benchmark::RegisterBenchmark(name.c_str(), BM_ParamCopy, h2d, pinned)
          ->Arg(269322)
          ->Arg(1863690)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::RegisterBenchmark("BM_GpuWorkerExchange", BM_GpuWorkerExchange)
      ->Args({269322, 1})
      ->Args({269322, 2})
      ->Args({1863690, 1})
      ->Args({1863690, 2})
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

}  // namespace
}  // namespace asgd::models::cuda

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (asgd::models::CudaDeviceCount() == 0) {
    std::printf("model_cuda_bench: no CUDA device, nothing measured (%s)\n",
                asgd::models::CudaUnavailableReason().c_str());
    return 0;
  }
  benchmark::AddCustomContext("cuda_device", asgd::models::cuda::DeviceDescription(0));
  asgd::models::cuda::Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
