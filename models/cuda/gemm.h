// Internal to models/cuda/ (and its tests and benchmark): cuBLAS for row-major matrices.
//
//   CublasHandle handle;                                   // on the current device
//   handle.Bind(stream);                                   // GEMMs go to this stream
//   RowMajorGemm(handle.get(), Op::kN, Op::kT, m, n, k, a, b, c);   // C = A·Bᵀ
//
// The models store matrices row-major (models/architecture.h); cuBLAS is column-major.
// A row-major matrix read column-major is its transpose, so C = op(A)·op(B) is computed
// as Cᵀ = op(B)ᵀ·op(A)ᵀ with the operands swapped, without any copy.
//
// Precision: the handle uses CUBLAS_DEFAULT_MATH, i.e. true FP32 SGEMMs; TF32 tensor
// cores (10-bit mantissa) would break the tolerances of the tests against the CPU models.
// A handle is used by one thread at a time (each model owns one).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace asgd::models::cuda {

class CublasHandle {
 public:
  CublasHandle();
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;

  cublasHandle_t get() const { return handle_; }
  // Makes the handle's calls run on stream (cheap; done before each model step).
  void Bind(cudaStream_t stream);

 private:
  cublasHandle_t handle_ = nullptr;
};

enum class Op { kN, kT };  // use the stored matrix as it is, or its transpose

// C = op(A)·op(B) + beta·C, all row-major: op(A) is m × k, op(B) is k × n, C is m × n.
// A is stored m × k (kN) or k × m (kT), B k × n (kN) or n × k (kT), densely (leading
// dimension = stored columns). Throws InvariantError when a dimension does not fit in
// cuBLAS's int, DeviceError when cuBLAS fails.
void RowMajorGemm(cublasHandle_t handle, Op op_a, Op op_b, int64_t m, int64_t n, int64_t k,
                  const float* a, const float* b, float* c, float beta = 0.0f);

}  // namespace asgd::models::cuda
