// The CUDA kernels of the GPU models. Contracts: kernels.h.
//
// Every elementwise kernel uses a grid-stride loop over 64-bit indices, so one launch
// covers any size with a bounded grid. Reductions accumulate in double in a fixed order
// (per-thread strided sums, then a shared-memory tree), never with atomics: the GPU
// models are deterministic run to run, like the CPU models.
//
// Kernels are templated only on the activation (4 instantiations), and the header pulls
// in nothing but the CUDA runtime API, to keep nvcc time low on 2-core CI machines.
#include "models/cuda/kernels.h"

#include <algorithm>

#include "models/cuda/cuda_check.h"

namespace asgd::models::cuda {
namespace {

constexpr int kThreads = 256;
// Grid-stride loops need no more blocks than this to fill any current GPU.
constexpr int64_t kMaxBlocks = 8192;

unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

template <int Act>
__device__ __forceinline__ float Activate(float z) {
  if constexpr (Act == static_cast<int>(KernelActivation::kRelu)) {
    return z > 0.0f ? z : 0.0f;
  } else if constexpr (Act == static_cast<int>(KernelActivation::kTanh)) {
    return tanhf(z);
  } else if constexpr (Act == static_cast<int>(KernelActivation::kSigmoid)) {
    return 1.0f / (1.0f + expf(-z));
  } else {
    return z;
  }
}

template <int Act>
__device__ __forceinline__ float Derivative(float y) {
  if constexpr (Act == static_cast<int>(KernelActivation::kRelu)) {
    return y > 0.0f ? 1.0f : 0.0f;
  } else if constexpr (Act == static_cast<int>(KernelActivation::kTanh)) {
    return 1.0f - y * y;
  } else {
    return y * (1.0f - y);
  }
}

template <int Act>
__global__ void BiasActivateKernel(float* y, int64_t n, const float* bias, int64_t inner,
                                   int64_t bias_count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = Activate<Act>(y[i] + bias[(i / inner) % bias_count]);
  }
}

template <int Act>
__global__ void ActivationBackwardKernel(const float* y, float* dy, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // relu: select rather than multiply, so that dy·0 of an infinite dy stays 0 as on
    // the CPU.
    if constexpr (Act == static_cast<int>(KernelActivation::kRelu)) {
      dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    } else {
      dy[i] *= Derivative<Act>(y[i]);
    }
  }
}

// Sums of the columns of d [rows, cols]: a block covers 32 columns with 8 row lanes.
constexpr int kColumnTile = 32;
constexpr int kRowLanes = 8;

__global__ void ColumnSumsKernel(const float* d, int64_t rows, int64_t cols, float* db) {
  __shared__ double partial[kRowLanes][kColumnTile + 1];
  const int64_t c = blockIdx.x * static_cast<int64_t>(kColumnTile) + threadIdx.x;
  double sum = 0.0;
  if (c < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kRowLanes) sum += d[r * cols + c];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    double total = 0.0;
    for (int lane = 0; lane < kRowLanes; ++lane) total += partial[lane][threadIdx.x];
    db[c] = static_cast<float>(total);
  }
}

// Block-wide sum of one double per thread (blockDim.x == kThreads), valid in thread 0.
__device__ double BlockSum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  return shared[0];
}

// Row sums of d [channels, n] in two passes: blockIdx.y is the channel, blockIdx.x one of
// `chunks` contiguous slices; then one thread per channel adds its slices in order.
__global__ void RowSumsPartialKernel(const float* d, int64_t n, int64_t chunk_len,
                                     double* partial) {
  __shared__ double shared[kThreads];
  const float* row = d + blockIdx.y * n;
  const int64_t begin = blockIdx.x * chunk_len;
  const int64_t end = begin + chunk_len < n ? begin + chunk_len : n;
  double sum = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) sum += row[i];
  const double total = BlockSum(sum, shared);
  if (threadIdx.x == 0) partial[blockIdx.y * gridDim.x + blockIdx.x] = total;
}

__global__ void RowSumsFinalKernel(const double* partial, int64_t channels, int64_t chunks,
                                   float* db) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  double total = 0.0;
  for (int64_t k = 0; k < chunks; ++k) total += partial[c * chunks + k];
  db[c] = static_cast<float>(total);
}

int64_t RowSumChunks(int64_t n) {
  // About 8 elements per thread of a block, at most 64 slices per channel.
  return std::clamp<int64_t>((n + 8 * kThreads - 1) / (8 * kThreads), 1, 64);
}

// One thread per row (classes is small: 10 for every dataset here).
__global__ void SoftmaxCrossEntropyKernel(const float* z, const int32_t* labels, int64_t rows,
                                          int64_t classes, float scale, float* dz,
                                          double* row_loss, int32_t* row_correct) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float* zr = z + r * classes;
    const int32_t label = labels[r];
    int64_t argmax = 0;
    float m = zr[0];
    for (int64_t c = 1; c < classes; ++c) {
      if (zr[c] > m) {
        m = zr[c];
        argmax = c;
      }
    }
    // Read before dz (which may alias z) is written.
    const float z_label = zr[label];
    float sum = 0.0f;
    float* dr = dz != nullptr ? dz + r * classes : nullptr;
    for (int64_t c = 0; c < classes; ++c) {
      const float e = expf(zr[c] - m);
      if (dr != nullptr) dr[c] = e;
      sum += e;
    }
    row_loss[r] = static_cast<double>(logf(sum) - (z_label - m));
    row_correct[r] = argmax == label ? 1 : 0;
    if (dr != nullptr) {
      const float inv = scale / sum;
      for (int64_t c = 0; c < classes; ++c) dr[c] *= inv;
      dr[label] -= scale;
    }
  }
}

__global__ void LossSumsKernel(const double* row_loss, const int32_t* row_correct, int64_t rows,
                               LossSums* sums) {
  __shared__ double shared[kThreads];
  double loss = 0.0, correct = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += kThreads) {
    loss += row_loss[r];
    correct += row_correct[r];
  }
  const double loss_total = BlockSum(loss, shared);
  __syncthreads();
  const double correct_total = BlockSum(correct, shared);
  if (threadIdx.x == 0) {
    sums->loss_sum = loss_total;
    sums->correct = static_cast<long long>(correct_total);
  }
}

// blockIdx.y is the cols row (c·k + u)·k + v; threads stride over its columns. Column
// coordinates fit in 32 bits (checked by the launcher), which keeps the divisions cheap.
__global__ void Im2ColKernel(const float* in, int64_t c_stride, int64_t n_stride,
                             ConvGeometry g, int32_t columns, float* cols) {
  const int32_t row = static_cast<int32_t>(blockIdx.y);
  const int32_t k = static_cast<int32_t>(g.kernel);
  const int32_t c = row / (k * k), u = (row / k) % k, v = row % k;
  const int32_t oh = static_cast<int32_t>(g.conv_height), ow = static_cast<int32_t>(g.conv_width);
  const int32_t h = static_cast<int32_t>(g.in_height), w = static_cast<int32_t>(g.in_width);
  const int32_t pad = static_cast<int32_t>(g.pad);
  float* out = cols + static_cast<int64_t>(row) * columns;
  // The loop index is 64-bit so that the last stride cannot overflow.
  for (int64_t index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       index < columns; index += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const auto col = static_cast<int32_t>(index);
    const int32_t n = col / (oh * ow);
    const int32_t rem = col - n * (oh * ow);
    const int32_t i = rem / ow, j = rem - (rem / ow) * ow;
    const int32_t ii = i + u - pad, jj = j + v - pad;
    float value = 0.0f;
    if (ii >= 0 && ii < h && jj >= 0 && jj < w) {
      value = in[c * c_stride + n * n_stride + static_cast<int64_t>(ii) * w + jj];
    }
    out[col] = value;
  }
}

// One thread per input element; adds its cols entries in (u, v) order, as the CPU's
// Col2Im does, so equal cols give bitwise equal sums.
__global__ void Col2ImKernel(const float* cols, int64_t batch, int64_t c_stride,
                             int64_t n_stride, ConvGeometry g, int64_t columns, float* din) {
  const int64_t h = g.in_height, w = g.in_width, k = g.kernel, pad = g.pad;
  const int64_t oh = g.conv_height, ow = g.conv_width;
  const int64_t total = g.in_channels * batch * h * w;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t x = idx % w;
    const int64_t y = (idx / w) % h;
    const int64_t n = (idx / (w * h)) % batch;
    const int64_t c = idx / (w * h * batch);
    float sum = 0.0f;
    for (int64_t u = 0; u < k; ++u) {
      const int64_t i = y + pad - u;
      if (i < 0 || i >= oh) continue;
      for (int64_t v = 0; v < k; ++v) {
        const int64_t j = x + pad - v;
        if (j < 0 || j >= ow) continue;
        sum += cols[((c * k + u) * k + v) * columns + n * oh * ow + i * ow + j];
      }
    }
    din[c * c_stride + n * n_stride + y * w + x] = sum;
  }
}

__global__ void MaxPoolForwardKernel(const float* in, int64_t planes, int64_t h, int64_t w,
                                     float* out, int32_t* argmax) {
  const int64_t ph = h / 2, pw = w / 2;
  const int64_t total = planes * ph * pw;
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < total;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = o % pw, i = (o / pw) % ph, p = o / (pw * ph);
    const float* src = in + p * h * w;
    const int64_t base = 2 * i * w + 2 * j;
    float m = src[base];
    int64_t at = base;
    if (src[base + 1] > m) {
      m = src[base + 1];
      at = base + 1;
    }
    if (src[base + w] > m) {
      m = src[base + w];
      at = base + w;
    }
    if (src[base + w + 1] > m) {
      m = src[base + w + 1];
      at = base + w + 1;
    }
    out[o] = m;
    argmax[o] = static_cast<int32_t>(at);
  }
}

// One thread per input element: windows do not overlap, so each element has at most one
// pooled output to take its gradient from.
__global__ void MaxPoolBackwardKernel(const float* dout, const int32_t* argmax, int64_t planes,
                                      int64_t h, int64_t w, float* din) {
  const int64_t ph = h / 2, pw = w / 2;
  const int64_t total = planes * h * w;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t x = idx % w, y = (idx / w) % h, p = idx / (w * h);
    const int64_t i = y / 2, j = x / 2;
    float value = 0.0f;
    if (i < ph && j < pw) {
      const int64_t o = (p * ph + i) * pw + j;
      if (argmax[o] == y * w + x) value = dout[o];
    }
    din[idx] = value;
  }
}

__global__ void CnhwToRowsKernel(const float* cnhw, int64_t channels, int64_t batch,
                                 int64_t plane, float* rows) {
  const int64_t width = channels * plane;
  const int64_t total = batch * width;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = idx / width, c = (idx % width) / plane, p = idx % plane;
    rows[idx] = cnhw[(c * batch + n) * plane + p];
  }
}

__global__ void RowsToCnhwKernel(const float* rows, int64_t channels, int64_t batch,
                                 int64_t plane, float* cnhw) {
  const int64_t total = channels * batch * plane;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = idx % plane, n = (idx / plane) % batch, c = idx / (plane * batch);
    cnhw[idx] = rows[(n * channels + c) * plane + p];
  }
}

}  // namespace

void LaunchBiasActivate(float* y, int64_t n, const float* bias, int64_t inner,
                        int64_t bias_count, KernelActivation act, cudaStream_t stream) {
  if (n == 0) return;
  switch (act) {
    case KernelActivation::kIdentity:
      BiasActivateKernel<0><<<Blocks(n), kThreads, 0, stream>>>(y, n, bias, inner, bias_count);
      break;
    case KernelActivation::kRelu:
      BiasActivateKernel<1><<<Blocks(n), kThreads, 0, stream>>>(y, n, bias, inner, bias_count);
      break;
    case KernelActivation::kTanh:
      BiasActivateKernel<2><<<Blocks(n), kThreads, 0, stream>>>(y, n, bias, inner, bias_count);
      break;
    case KernelActivation::kSigmoid:
      BiasActivateKernel<3><<<Blocks(n), kThreads, 0, stream>>>(y, n, bias, inner, bias_count);
      break;
  }
  ASGD_CUDA_CHECK(cudaGetLastError());
}

void LaunchActivationBackward(const float* y, float* dy, int64_t n, KernelActivation act,
                              cudaStream_t stream) {
  if (n == 0) return;
  switch (act) {
    case KernelActivation::kIdentity:
      return;
    case KernelActivation::kRelu:
      ActivationBackwardKernel<1><<<Blocks(n), kThreads, 0, stream>>>(y, dy, n);
      break;
    case KernelActivation::kTanh:
      ActivationBackwardKernel<2><<<Blocks(n), kThreads, 0, stream>>>(y, dy, n);
      break;
    case KernelActivation::kSigmoid:
      ActivationBackwardKernel<3><<<Blocks(n), kThreads, 0, stream>>>(y, dy, n);
      break;
  }
  ASGD_CUDA_CHECK(cudaGetLastError());
}

void LaunchColumnSums(const float* d, int64_t rows, int64_t cols, float* db,
                      cudaStream_t stream) {
  if (cols == 0) return;
  const dim3 block(kColumnTile, kRowLanes);
  const dim3 grid(static_cast<unsigned>((cols + kColumnTile - 1) / kColumnTile));
  ColumnSumsKernel<<<grid, block, 0, stream>>>(d, rows, cols, db);
  ASGD_CUDA_CHECK(cudaGetLastError());
}

int64_t RowSumsScratch(int64_t channels, int64_t n) { return channels * RowSumChunks(n); }

void LaunchRowSums(const float* d, int64_t channels, int64_t n, double* partial, float* db,
                   cudaStream_t stream) {
  if (channels == 0) return;
  const int64_t chunks = RowSumChunks(n);
  const int64_t chunk_len = (n + chunks - 1) / chunks;
  RowSumsPartialKernel<<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(channels)),
                         kThreads, 0, stream>>>(d, n, chunk_len, partial);
  ASGD_CUDA_CHECK(cudaGetLastError());
  RowSumsFinalKernel<<<static_cast<unsigned>((channels + kThreads - 1) / kThreads), kThreads, 0,
                       stream>>>(partial, channels, chunks, db);
  ASGD_CUDA_CHECK(cudaGetLastError());
}

void LaunchSoftmaxCrossEntropy(const float* z, const int32_t* labels, int64_t rows,
                               int64_t classes, float scale, float* dz, double* row_loss,
                               int32_t* row_correct, LossSums* sums, cudaStream_t stream) {
  if (rows > 0) {
    SoftmaxCrossEntropyKernel<<<Blocks(rows), kThreads, 0, stream>>>(
        z, labels, rows, classes, scale, dz, row_loss, row_correct);
    ASGD_CUDA_CHECK(cudaGetLastError());
  }
  LossSumsKernel<<<1, kThreads, 0, stream>>>(row_loss, row_correct, rows, sums);
  ASGD_CUDA_CHECK(cudaGetLastError());
}

void LaunchIm2Col(const float* in, int64_t batch, int64_t c_stride, int64_t n_stride,
                  const ConvGeometry& g, float* cols, cudaStream_t stream) {
  const int64_t rows = g.in_channels * g.kernel * g.kernel;
  const int64_t columns = batch * g.conv_height * g.conv_width;
  if (rows == 0 || columns == 0) return;
  // Launch limits: grid.y ≤ 65535 rows, 32-bit column coordinates.
  if (rows > 65535 || columns > INT32_MAX) {
    ASGD_CUDA_CHECK(cudaErrorInvalidConfiguration);
  }
  const dim3 grid(Blocks(columns) < 1024 ? Blocks(columns) : 1024, static_cast<unsigned>(rows));
  Im2ColKernel<<<grid, kThreads, 0, stream>>>(in, c_stride, n_stride, g,
                                              static_cast<int32_t>(columns), cols);
  ASGD_CUDA_CHECK(cudaGetLastError());
}

void LaunchCol2Im(const float* cols, int64_t batch, int64_t c_stride, int64_t n_stride,
                  const ConvGeometry& g, float* din, cudaStream_t stream) {
  const int64_t total = g.in_channels * batch * g.in_height * g.in_width;
  if (total == 0) return;
  const int64_t columns = batch * g.conv_height * g.conv_width;
  Col2ImKernel<<<Blocks(total), kThreads, 0, stream>>>(cols, batch, c_stride, n_stride, g,
                                                        columns, din);
  ASGD_CUDA_CHECK(cudaGetLastError());
}

void LaunchMaxPoolForward(const float* in, int64_t planes, int64_t h, int64_t w, float* out,
                          int32_t* argmax, cudaStream_t stream) {
  const int64_t total = planes * (h / 2) * (w / 2);
  if (total == 0) return;
  MaxPoolForwardKernel<<<Blocks(total), kThreads, 0, stream>>>(in, planes, h, w, out, argmax);
  ASGD_CUDA_CHECK(cudaGetLastError());
}

void LaunchMaxPoolBackward(const float* dout, const int32_t* argmax, int64_t planes,
                           int64_t h, int64_t w, float* din, cudaStream_t stream) {
  const int64_t total = planes * h * w;
  if (total == 0) return;
  MaxPoolBackwardKernel<<<Blocks(total), kThreads, 0, stream>>>(dout, argmax, planes, h, w,
                                                                 din);
  ASGD_CUDA_CHECK(cudaGetLastError());
}

void LaunchCnhwToRows(const float* cnhw, int64_t channels, int64_t batch, int64_t plane,
                      float* rows, cudaStream_t stream) {
  const int64_t total = channels * batch * plane;
  if (total == 0) return;
  CnhwToRowsKernel<<<Blocks(total), kThreads, 0, stream>>>(cnhw, channels, batch, plane, rows);
  ASGD_CUDA_CHECK(cudaGetLastError());
}

void LaunchRowsToCnhw(const float* rows, int64_t channels, int64_t batch, int64_t plane,
                      float* cnhw, cudaStream_t stream) {
  const int64_t total = channels * batch * plane;
  if (total == 0) return;
  RowsToCnhwKernel<<<Blocks(total), kThreads, 0, stream>>>(rows, channels, batch, plane, cnhw);
  ASGD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace asgd::models::cuda
