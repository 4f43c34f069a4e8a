// Internal to models/cuda/ (and its tests and benchmark): ASGD_CUDA_CHECK, which turns
// a failed CUDA runtime or cuBLAS call into a DeviceError (core/error.h):
//
//   ASGD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
//   ASGD_CUDA_CHECK(cublasSgemm(handle, ...));
//   Kernel<<<grid, block, 0, stream>>>(...);
//   ASGD_CUDA_CHECK(cudaGetLastError());          // a failed launch
//
// The message names the call as written, the error's name and description, the source
// file and line and the current device, on one line:
//   "cuda: cudaMalloc(&ptr, bytes) failed: cudaErrorMemoryAllocation (out of memory) at
//    models/cuda/device_memory.cc:30 on device 0"
// The call is evaluated exactly once. After a failure the runtime's last-error state is
// cleared, so a later cudaGetLastError() check does not report the same error again.
//
// Compiled by nvcc (C++17) and the host compiler; includes only the CUDA C APIs.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace asgd::models::cuda::internal {

[[noreturn]] void ThrowCudaError(cudaError_t error, const char* call, const char* file,
                                 int line);
[[noreturn]] void ThrowCublasError(cublasStatus_t status, const char* call, const char* file,
                                   int line);

inline void CheckCall(cudaError_t error, const char* call, const char* file, int line) {
  if (error != cudaSuccess) ThrowCudaError(error, call, file, line);
}
inline void CheckCall(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) ThrowCublasError(status, call, file, line);
}

// "models/cuda/kernels.cu" for "<repository>/models/cuda/kernels.cu": paths inside the
// repository relative to it, so messages do not depend on where the tree was built;
// a build folder's relative "../models/cuda/kernels.cu" likewise; other paths unchanged.
const char* SourcePath(const char* file);

}  // namespace asgd::models::cuda::internal

#define ASGD_CUDA_CHECK(call) \
  ::asgd::models::cuda::internal::CheckCall((call), #call, __FILE__, __LINE__)
