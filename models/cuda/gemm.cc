#include "models/cuda/gemm.h"

#include <limits>

#include "core/check.h"
#include "models/cuda/cuda_check.h"

namespace asgd::models::cuda {

CublasHandle::CublasHandle() {
  ASGD_CUDA_CHECK(cublasCreate(&handle_));
  // Explicit, so that a changed library default cannot silently switch to TF32.
  ASGD_CUDA_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
  ASGD_CUDA_CHECK(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
}

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) (void)cublasDestroy(handle_);
}

void CublasHandle::Bind(cudaStream_t stream) { ASGD_CUDA_CHECK(cublasSetStream(handle_, stream)); }

namespace {

int ToInt(int64_t v, const char* what) {
  ASGD_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "GEMM dimension ", what, " = ", v,
             " does not fit cuBLAS's int");
  return static_cast<int>(v);
}

}  // namespace

void RowMajorGemm(cublasHandle_t handle, Op op_a, Op op_b, int64_t m, int64_t n, int64_t k,
                  const float* a, const float* b, float* c, float beta) {
  const int mi = ToInt(m, "m"), ni = ToInt(n, "n"), ki = ToInt(k, "k");
  if (mi == 0 || ni == 0) return;
  // Leading dimensions of the stored (row-major) operands: their column counts.
  const int lda = op_a == Op::kN ? ki : mi;
  const int ldb = op_b == Op::kN ? ni : ki;
  const float alpha = 1.0f;
  // Column-major Cᵀ (n × m) = op(B)ᵀ (n × k) · op(A)ᵀ (k × m). The stored B read
  // column-major is already Bᵀ, so op(B)ᵀ needs no transpose flag when op_b is kN.
  ASGD_CUDA_CHECK(cublasSgemm(handle, op_b == Op::kN ? CUBLAS_OP_N : CUBLAS_OP_T,
                              op_a == Op::kN ? CUBLAS_OP_N : CUBLAS_OP_T, ni, mi, ki, &alpha, b,
                              ldb < 1 ? 1 : ldb, a, lda < 1 ? 1 : lda, &beta, c, ni));
}

}  // namespace asgd::models::cuda
