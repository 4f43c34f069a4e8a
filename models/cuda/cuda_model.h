// The device-side interface of the CUDA models, for GPU workers that keep parameters on
// the device. Includes the CUDA runtime API header (for cudaStream_t): code that needs
// only the Model interface includes models/cuda/factory.h instead.
//
// Memory a CudaModel owns, all sized layout().size() floats and in the flat layout (same
// offsets as the CPU ParamLayout, so a shard's range is one contiguous copy):
//   device_params(), device_grad()   one device allocation, parameters then gradient
//   pinned_params(), pinned_grad()   page-locked host staging buffers
//
// A GPU worker that overlaps the next pull's host→device copy with compute:
//
//   CudaModel& m = dynamic_cast<CudaModel&>(*model);    // every NewCuda*Model result
//   cudaStream_t copy = ...;                            // the worker's second stream
//   // pull into m.pinned_params(), then:
//   cudaMemcpyAsync(d_next, m.pinned_params(), bytes, cudaMemcpyHostToDevice, copy);
//   float loss = m.LossAndGradientDevice(d_current, batch, m.device_grad(), m.stream());
//   cudaMemcpyAsync(m.pinned_grad(), m.device_grad(), bytes, cudaMemcpyDeviceToHost,
//                   m.stream());
//
// The Model interface (LossAndGradient, Evaluate with host spans) copies params through
// pinned_params() into device_params() and the gradient back through device_grad() and
// pinned_grad(), on stream(): it overwrites all four, so a caller mixing both styles
// must not keep data there across host-span calls.
//
// Thread safety: as Model (one thread per instance; instances may share a device).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "datasets/dataset.h"
#include "models/model.h"

namespace asgd::models::cuda {

class CudaModel : public Model {
 public:
  // The CUDA device ordinal this model computes on.
  virtual int device() const = 0;
  // The stream the host-span calls use, owned by the model (non-blocking).
  virtual cudaStream_t stream() const = 0;

  virtual float* device_params() = 0;
  virtual float* device_grad() = 0;
  virtual float* pinned_params() = 0;
  virtual float* pinned_grad() = 0;

  // As LossAndGradient with parameters and gradient in device memory of device():
  // uploads the batch (host memory, through pinned staging), enqueues forward and
  // backward on `stream` (the cuBLAS handle is bound to it for the call) and writes the
  // gradient of the mean loss to d_grad. Returns the mean loss, and so waits for
  // `stream` up to the loss; d_grad is complete when it returns. Work enqueued earlier
  // on other streams (e.g. a copy of the next parameters) keeps running meanwhile.
  // REQUIRES: d_params and d_grad hold layout().size() floats of device() and do not
  // overlap; stream belongs to device(); the batch as for LossAndGradient
  // (InvariantError otherwise, before any device work).
  virtual float LossAndGradientDevice(const float* d_params, const datasets::BatchView& batch,
                                      float* d_grad, cudaStream_t stream) = 0;
  // As Evaluate with parameters in device memory.
  virtual EvalResult EvaluateDevice(const float* d_params, const datasets::BatchView& batch,
                                    cudaStream_t stream) = 0;
};

}  // namespace asgd::models::cuda
