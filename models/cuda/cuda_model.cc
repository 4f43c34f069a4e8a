// CudaModelImpl: the CudaModel around a CudaNet (contracts in cuda_model.h, factory.h
// and net.h), and device discovery.
#include "models/cuda/cuda_model.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/error.h"
#include "models/cuda/cuda_check.h"
#include "models/cuda/device_memory.h"
#include "models/cuda/factory.h"
#include "models/cuda/gemm.h"
#include "models/cuda/net.h"

namespace asgd::models::cuda {
namespace {

struct Probe {
  int count = 0;
  std::string reason;
};

// Asked once per process: the answer cannot change (the runtime reads
// CUDA_VISIBLE_DEVICES once), and asking again after a failure costs a driver load.
const Probe& GetProbe() {
  static const Probe probe = [] {
    Probe p;
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess) {
      (void)cudaGetLastError();
      p.reason = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(error) + " (" +
                 cudaGetErrorName(error) + ")";
    } else if (count <= 0) {
      p.reason = "the CUDA driver reports no device (check CUDA_VISIBLE_DEVICES)";
    } else {
      p.count = count;
    }
    for (char& c : p.reason) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    return p;
  }();
  return probe;
}

// The gradient starts this many floats (256 bytes) into the shared allocation at the
// earliest, so that it is as aligned as a fresh cudaMalloc.
constexpr int64_t kAlignFloats = 64;

int64_t AlignUp(int64_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

// Throws InvariantError as the CPU loss does for a label outside [0, classes).
void CheckLabels(const datasets::BatchView& batch, int classes) {
  for (int64_t r = 0; r < batch.size; ++r) {
    const int32_t label = batch.labels[r];
    ASGD_CHECK(label >= 0 && label < classes, "label ", label, " of example ", r, " outside [0, ",
               classes, ")");
  }
}

class CudaModelImpl final : public CudaModel {
 public:
  CudaModelImpl(CudaModelParts parts, int device)
      : parts_(std::move(parts)),
        device_(device),
        describe_(parts_.info.describe + " on cuda:" + std::to_string(device)) {
    if (device < 0 || device >= DeviceCount()) {
      const std::string reason = UnavailableReason();
      throw DeviceError("cuda: no device cuda:" + std::to_string(device) + " (" +
                            std::to_string(DeviceCount()) + " usable" +
                            (reason.empty() ? std::string() : "; " + reason) + ")",
                        device);
    }
    DeviceGuard guard(device_);
    res_ = std::make_unique<Resources>();
    const int64_t n = size();
    res_->params_grad.Resize(AlignUp(n) + n);
    res_->pinned_params.Resize(n);
    res_->pinned_grad.Resize(n);
    res_->sums.Resize(1);
    res_->pinned_sums.Resize(1);
    res_->net = parts_.make_net();
  }

  ~CudaModelImpl() override {
    try {
      DeviceGuard guard(device_);
      (void)cudaStreamSynchronize(res_->stream.get());
      res_.reset();
    } catch (const Error&) {
      // The device is gone; the handles' destructors ignore failures.
      res_.reset();
    }
  }

  CudaModelImpl(const CudaModelImpl&) = delete;
  CudaModelImpl& operator=(const CudaModelImpl&) = delete;

  std::string Name() const override { return parts_.info.name; }
  std::string Describe() const override { return describe_; }
  const ParamLayout& layout() const override { return parts_.spec->layout; }
  void Initialize(std::span<float> params, uint64_t seed) const override {
    InitializeParams(*parts_.spec, params, seed);
  }
  int64_t num_features() const override { return parts_.info.features; }
  int num_classes() const override { return parts_.info.classes; }
  std::unique_ptr<Model> Clone() const override {
    return std::make_unique<CudaModelImpl>(parts_, device_);
  }

  int device() const override { return device_; }
  cudaStream_t stream() const override { return res_->stream.get(); }
  float* device_params() override { return res_->params_grad.get(); }
  float* device_grad() override { return res_->params_grad.get() + AlignUp(size()); }
  float* pinned_params() override { return res_->pinned_params.get(); }
  float* pinned_grad() override { return res_->pinned_grad.get(); }

  float LossAndGradient(std::span<const float> params, const datasets::BatchView& batch,
                        std::span<float> grad) override {
    return HostStep(params, batch, grad, nullptr);
  }

  float LossAndGradientReporting(std::span<const float> params, const datasets::BatchView& batch,
                                 std::span<float> grad, GradientReady& ready) override {
    return HostStep(params, batch, grad, &ready);
  }

  bool ReportsGradientByLayer() const override { return true; }

  EvalResult Evaluate(std::span<const float> params, const datasets::BatchView& batch) override {
    CheckSizes(params.size(), params.size());
    CheckBatch(batch, parts_.info, /*allow_empty=*/true);
    CheckLabels(batch, parts_.info.classes);
    if (batch.size == 0) return {};
    DeviceGuard guard(device_);
    UploadParams(params, stream());
    return EvaluateChunks(device_params(), batch, stream());
  }

  float LossAndGradientDevice(const float* d_params, const datasets::BatchView& batch,
                              float* d_grad, cudaStream_t s) override {
    ASGD_CHECK(d_params != nullptr && d_grad != nullptr, "device buffers");
    CheckBatch(batch, parts_.info, /*allow_empty=*/false);
    CheckLabels(batch, parts_.info.classes);
    DeviceGuard guard(device_);
    UploadBatch(batch, s);
    EnqueueStep(d_params, batch.size, d_grad, s);
    const EvalResult r = ReadSums(batch.size, s);
    return static_cast<float>(r.loss_sum / static_cast<double>(batch.size));
  }

  EvalResult EvaluateDevice(const float* d_params, const datasets::BatchView& batch,
                            cudaStream_t s) override {
    ASGD_CHECK(d_params != nullptr, "device buffer");
    CheckBatch(batch, parts_.info, /*allow_empty=*/true);
    CheckLabels(batch, parts_.info.classes);
    if (batch.size == 0) return {};
    DeviceGuard guard(device_);
    return EvaluateChunks(d_params, batch, s);
  }

 private:
  // Everything that lives on the device, released under a DeviceGuard. Declaration order
  // is destruction order reversed: the net's scratch goes first, the stream last.
  struct Resources {
    OwnedStream stream;
    CublasHandle cublas;
    DeviceBuffer<float> params_grad;  // [params | padding | grad]
    PinnedBuffer<float> pinned_params;
    PinnedBuffer<float> pinned_grad;
    PinnedBuffer<float> pinned_x;  // batch staging, grows
    PinnedBuffer<int32_t> pinned_labels;
    DeviceBuffer<float> x;
    DeviceBuffer<int32_t> labels;
    DeviceBuffer<double> row_loss;
    DeviceBuffer<int32_t> row_correct;
    DeviceBuffer<LossSums> sums;
    PinnedBuffer<LossSums> pinned_sums;
    std::unique_ptr<CudaNet> net;
    // LossAndGradientReporting's events, one per layer, made on first use.
    std::vector<std::unique_ptr<OwnedEvent>> layer_events;
  };

  int64_t size() const { return parts_.spec->layout.size(); }
  std::size_t Bytes() const { return static_cast<std::size_t>(size()) * sizeof(float); }

  void CheckSizes(std::size_t params, std::size_t grad) const {
    ASGD_CHECK_EQ(static_cast<int64_t>(params), size(), "params vs layout of ", Name());
    ASGD_CHECK_EQ(static_cast<int64_t>(grad), size(), "grad vs layout of ", Name());
  }

  // Host span → pinned staging → device_params(), on s.
  void UploadParams(std::span<const float> params, cudaStream_t s) {
    std::memcpy(pinned_params(), params.data(), Bytes());
    ASGD_CUDA_CHECK(
        cudaMemcpyAsync(device_params(), pinned_params(), Bytes(), cudaMemcpyHostToDevice, s));
  }

  // The batch's inputs and labels → pinned staging → device, on s. The staging is free:
  // every call waits for its stream before returning.
  void UploadBatch(const datasets::BatchView& batch, cudaStream_t s) {
    const int64_t values = batch.size * batch.num_features;
    res_->pinned_x.Reserve(values);
    res_->pinned_labels.Reserve(batch.size);
    res_->x.Reserve(values);
    res_->labels.Reserve(batch.size);
    std::memcpy(res_->pinned_x.get(), batch.x, static_cast<std::size_t>(values) * sizeof(float));
    std::memcpy(res_->pinned_labels.get(), batch.labels,
                static_cast<std::size_t>(batch.size) * sizeof(int32_t));
    ASGD_CUDA_CHECK(cudaMemcpyAsync(res_->x.get(), res_->pinned_x.get(),
                                    static_cast<std::size_t>(values) * sizeof(float),
                                    cudaMemcpyHostToDevice, s));
    ASGD_CUDA_CHECK(cudaMemcpyAsync(res_->labels.get(), res_->pinned_labels.get(),
                                    static_cast<std::size_t>(batch.size) * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, s));
  }

  // LossAndGradient(Reporting) on host spans: upload, step, gradient back to grad. With
  // `ready`, each layer's range leaves the device as soon as backward has written it: a
  // copy to the pinned staging enqueued right after the layer's kernels, and an event after
  // the copy; the host waits for the events in order (the stream keeps running the earlier
  // layers' backward meanwhile) and reports each range once its values are in grad. The
  // same kernels and the same bytes as the one copy without it.
  float HostStep(std::span<const float> params, const datasets::BatchView& batch,
                 std::span<float> grad, GradientReady* ready) {
    CheckSizes(params.size(), grad.size());
    CheckBatch(batch, parts_.info, /*allow_empty=*/false);
    CheckLabels(batch, parts_.info.classes);
    DeviceGuard guard(device_);
    const cudaStream_t s = stream();
    UploadParams(params, s);
    UploadBatch(batch, s);
    if (ready == nullptr) {
      EnqueueStep(device_params(), batch.size, device_grad(), s);
      ASGD_CUDA_CHECK(
          cudaMemcpyAsync(pinned_grad(), device_grad(), Bytes(), cudaMemcpyDeviceToHost, s));
    } else {
      std::vector<Range> layers;
      EnqueueStep(device_params(), batch.size, device_grad(), s, [&](Range r) {
        if (res_->layer_events.size() <= layers.size()) {
          res_->layer_events.push_back(std::make_unique<OwnedEvent>());
        }
        ASGD_CUDA_CHECK(cudaMemcpyAsync(pinned_grad() + r.begin, device_grad() + r.begin,
                                        static_cast<std::size_t>(r.count) * sizeof(float),
                                        cudaMemcpyDeviceToHost, s));
        ASGD_CUDA_CHECK(cudaEventRecord(res_->layer_events[layers.size()]->get(), s));
        layers.push_back(r);
      });
      for (std::size_t i = 0; i < layers.size(); ++i) {
        const Range r = layers[i];
        ASGD_CUDA_CHECK(cudaEventSynchronize(res_->layer_events[i]->get()));
        std::memcpy(grad.data() + r.begin, pinned_grad() + r.begin,
                    static_cast<std::size_t>(r.count) * sizeof(float));
        ready->Ready(r);
      }
    }
    const EvalResult r = ReadSums(batch.size, s);
    if (ready == nullptr) std::memcpy(grad.data(), pinned_grad(), Bytes());
    return static_cast<float>(r.loss_sum / static_cast<double>(batch.size));
  }

  // Forward and loss of the uploaded batch of `rows` examples; backward into d_grad
  // unless it is null, telling layer_done (if set) each layer's range (NetContext).
  void EnqueueStep(const float* d_params, int64_t rows, float* d_grad, cudaStream_t s,
                   std::function<void(Range)> layer_done = {}) {
    res_->cublas.Bind(s);
    const NetContext ctx{s, res_->cublas.get(), std::move(layer_done)};
    res_->row_loss.Reserve(rows);
    res_->row_correct.Reserve(rows);
    const float* logits = res_->net->Forward(ctx, d_params, res_->x.get(), rows);
    float* dlogits = d_grad != nullptr ? res_->net->dlogits() : nullptr;
    LaunchSoftmaxCrossEntropy(logits, res_->labels.get(), rows, parts_.info.classes,
                              1.0f / static_cast<float>(rows), dlogits, res_->row_loss.get(),
                              res_->row_correct.get(), res_->sums.get(), s);
    if (d_grad != nullptr) res_->net->Backward(ctx, d_params, res_->x.get(), rows, d_grad);
  }

  // Waits for s and returns the loss sums of the last EnqueueStep.
  EvalResult ReadSums(int64_t rows, cudaStream_t s) {
    ASGD_CUDA_CHECK(cudaMemcpyAsync(res_->pinned_sums.get(), res_->sums.get(), sizeof(LossSums),
                                    cudaMemcpyDeviceToHost, s));
    ASGD_CUDA_CHECK(cudaStreamSynchronize(s));
    EvalResult r;
    r.loss_sum = res_->pinned_sums.get()->loss_sum;
    r.correct = res_->pinned_sums.get()->correct;
    r.count = rows;
    return r;
  }

  EvalResult EvaluateChunks(const float* d_params, const datasets::BatchView& batch,
                            cudaStream_t s) {
    EvalResult total;
    for (int64_t begin = 0; begin < batch.size; begin += kCudaEvalChunk) {
      const int64_t count = std::min(kCudaEvalChunk, batch.size - begin);
      UploadBatch(SliceBatch(batch, begin, count), s);
      EnqueueStep(d_params, count, nullptr, s);
      total += ReadSums(count, s);
    }
    return total;
  }

  const CudaModelParts parts_;
  const int device_;
  const std::string describe_;
  std::unique_ptr<Resources> res_;
};

}  // namespace

int DeviceCount() { return GetProbe().count; }

std::string UnavailableReason() { return GetProbe().reason; }

std::string DeviceDescription(int device) {
  cudaDeviceProp prop{};
  if (device < 0 || device >= DeviceCount()) {
    throw DeviceError("cuda: no device cuda:" + std::to_string(device), device);
  }
  ASGD_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const double gib = static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
  char memory[32];
  std::snprintf(memory, sizeof(memory), "%.1f GiB", gib);
  return std::string(prop.name) + " (compute capability " + std::to_string(prop.major) + "." +
         std::to_string(prop.minor) + ", " + memory + ")";
}

KernelActivation ToKernel(Activation activation) {
  switch (activation) {
    case Activation::kRelu:
      return KernelActivation::kRelu;
    case Activation::kTanh:
      return KernelActivation::kTanh;
    case Activation::kSigmoid:
      return KernelActivation::kSigmoid;
  }
  return KernelActivation::kIdentity;
}

std::unique_ptr<Model> NewCudaModel(CudaModelParts parts, int device) {
  return std::make_unique<CudaModelImpl>(std::move(parts), device);
}

}  // namespace asgd::models::cuda
