// The CUDA models: softmax regression, the multilayer perceptron and the LeNet-5-style
// CNN on one GPU, behind the Model interface (models/model.h). Plain C++: include this
// from code that must not see CUDA headers; models/device.h (NewModelOn) is the usual
// way in, this header is for code that already knows it wants a GPU.
//
// A CUDA model has exactly the layout and initial values of the CPU model of the same
// architecture (both build them from models/architecture.h): parameter vectors move
// between CPU and GPU models unchanged. It computes the same loss, accuracy counts and
// gradient as the CPU model up to float rounding (models/cuda/README.md states the
// tolerances the tests enforce).
//
// Every model these functions return is a CudaModel (models/cuda/cuda_model.h), which
// adds device-side entry points for GPU workers.
//
// Thread safety and sharing: one instance is used by one thread at a time (as every
// Model). Any number of instances, in any threads, may share a device: each owns its
// stream, cuBLAS handle, scratch and staging buffers, and selects its device at every
// call (the thread's current device is restored on return).
#pragma once

#include <memory>
#include <string>

#include "models/architecture.h"
#include "models/model.h"

namespace asgd::models::cuda {

// The number of usable CUDA devices; 0 when the driver is missing or too old, there is no
// device, or the runtime reports any error. Cached after the first call.
int DeviceCount();
// Why DeviceCount() is 0, in one line (e.g. "cudaGetDeviceCount failed: CUDA driver
// version is insufficient for CUDA runtime version"); "" when a device is usable.
std::string UnavailableReason();
// "NVIDIA H100 80GB HBM3 (compute capability 9.0, 79.1 GiB)".
// REQUIRES: 0 <= device < DeviceCount() (DeviceError otherwise).
std::string DeviceDescription(int device);

// New models on `device`. Name() and layout() are those of the CPU model
// (NewCpuMlpModel, NewCpuCnnModel), Describe() adds " on cuda:<device>".
// Construction allocates the device buffers for parameters and gradient and pinned
// staging buffers of the same size; scratch grows with the largest batch seen.
// REQUIRES: as the CPU factories (InvariantError); 0 <= device < DeviceCount()
// (DeviceError otherwise, also for any other CUDA failure).
std::unique_ptr<Model> NewCudaMlpModel(const MlpArchitecture& arch, int device);
std::unique_ptr<Model> NewCudaCnnModel(const CnnArchitecture& arch, int device);

}  // namespace asgd::models::cuda
