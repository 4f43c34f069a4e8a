// Internal to models/cuda/: what the CUDA models share.
//
// CudaModelImpl (cuda_model.cc) implements CudaModel — argument checks, the device
// buffers for parameters and gradient, pinned staging, batch upload, the loss — around a
// CudaNet: the network's forward and backward passes on device memory, like the CPU
// models' Net<T> (models/cpu_model.h). CudaDenseStack is the fully connected stack both
// the MLP and the CNN end in (the CPU's DenseStack).
//
// Nets only enqueue work on ctx.stream (GEMMs through ctx.cublas, already bound to that
// stream); they synchronise nothing, except that growing their scratch (cudaMalloc)
// synchronises the device.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/param_layout.h"
#include "models/architecture.h"
#include "models/cpu_model.h"
#include "models/cuda/device_memory.h"
#include "models/cuda/kernels.h"

namespace asgd::models::cuda {

struct NetContext {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  // Optional: Backward calls it with a layer's range of the gradient (its weight and
  // bias) right after enqueueing the kernels that write it, the last layer first; the
  // values exist once the stream has run that far.
  std::function<void(Range)> layer_done;
};

KernelActivation ToKernel(Activation activation);

class CudaNet {
 public:
  virtual ~CudaNet() = default;
  // Runs the network on x [rows, features] (device); returns the logits [rows, classes]
  // in the net's scratch, valid until the next call.
  virtual float* Forward(const NetContext& ctx, const float* params, const float* x,
                         int64_t rows) = 0;
  // Where the caller puts dL/dlogits [rows, classes] before Backward.
  virtual float* dlogits() = 0;
  // Backpropagates dlogits() through the last Forward (same params, x, rows) and writes
  // every entry of the gradient grad (layout().size() floats, device); tells
  // ctx.layer_done, if set, each layer's range as it goes.
  virtual void Backward(const NetContext& ctx, const float* params, const float* x, int64_t rows,
                        float* grad) = 0;
};

// The layers "fc1" … of spec's layout: inputs → hidden… → classes; layer l computes
// h_l = act(h_{l−1}·W_l + b_l) (identity for the logits layer).
class CudaDenseStack {
 public:
  CudaDenseStack(int64_t inputs, const std::vector<int64_t>& hidden, Activation activation,
                 int classes, const ParamSpec& spec);

  int64_t inputs() const { return layers_.front().in; }
  int64_t classes() const { return layers_.back().out; }

  // As CudaNet::Forward on x [rows, inputs].
  float* Forward(const NetContext& ctx, const float* params, const float* x, int64_t rows);
  float* dlogits() { return layers_.back().d.get(); }
  // As CudaNet::Backward for the stack's tensors; also writes dL/dx [rows, inputs] to dx
  // unless it is null.
  void Backward(const NetContext& ctx, const float* params, const float* x, int64_t rows,
                float* grad, float* dx);

 private:
  struct Layer {
    int64_t in, out;
    int64_t w, b;           // offsets of weight and bias in the flat vector
    DeviceBuffer<float> h;  // output [rows, out] after the activation
    DeviceBuffer<float> d;  // dL/d(output), then dL/d(pre-activation)
  };
  void Reserve(int64_t rows);

  KernelActivation activation_;
  std::vector<Layer> layers_;
  int64_t capacity_ = 0;
};

// What a CUDA model says about itself (as CpuModelInfo) and how to make its net.
struct CudaModelParts {
  std::shared_ptr<const ParamSpec> spec;
  CpuModelInfo info;
  // A new net (own scratch) for one model instance; called on the model's device.
  std::function<std::unique_ptr<CudaNet>()> make_net;
};

// The CudaModel around parts, on device. Throws DeviceError for a bad device.
std::unique_ptr<Model> NewCudaModel(CudaModelParts parts, int device);

// Evaluate and EvaluateDevice process at most this many examples at a time, bounding
// scratch memory (the LeNet CNN needs about 0.5 MB of scratch per example).
inline constexpr int64_t kCudaEvalChunk = 1024;

}  // namespace asgd::models::cuda
