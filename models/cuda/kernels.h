// Internal to models/cuda/: the CUDA kernels of the GPU models, behind plain host
// launchers. Every launcher only enqueues work on `stream` (no synchronisation, no
// allocation) and reports a launch failure as DeviceError (ASGD_CUDA_CHECK); pointers are
// device memory unless a parameter says otherwise.
//
// This header is compiled by both nvcc (kernels.cu, C++17) and the host compiler (the
// models, the tests), so it includes nothing from asgd that needs C++20 and only the CUDA
// runtime API.
//
// The kernels reproduce the CPU layers of models/layers.h, with the same conventions:
//   * matrices are row-major; a batch of dense activations is [rows, features];
//   * relu'(0) = 0; activation backward uses the layer's output y (tanh' = 1 − y²,
//     sigmoid' = y (1 − y));
//   * 2×2 max-pooling with stride 2, odd last row/column dropped, ties to the first
//     maximum in the order (0,0), (0,1), (1,0), (1,1);
//   * im2col rows are (c·k + u)·k + v, columns n·oh·ow + i·ow + j (layers::Im2Col);
//   * softmax cross-entropy shifts by the row maximum, counts the first argmax.
// Reductions (bias gradients, loss sums) accumulate in double in a fixed order, so a
// result does not depend on scheduling: the same inputs give bitwise the same outputs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace asgd::models::cuda {

// What follows a layer: the models' Activation plus "nothing" (the logits layer).
enum class KernelActivation : int { kIdentity = 0, kRelu = 1, kTanh = 2, kSigmoid = 3 };

// Geometry of one convolution (models::ConvBlockShape without the pooling output).
struct ConvGeometry {
  int64_t in_channels, in_height, in_width;
  int64_t kernel, pad;
  int64_t conv_height, conv_width;
};

// The loss of a batch as the device reduces it.
struct LossSums {
  double loss_sum;
  long long correct;
};

// y[i] ← act(y[i] + bias[(i / inner) % bias_count]) for i in [0, n).
// Dense layer [rows, out]: inner = 1, bias_count = out. Convolution [channels, m]
// (CNHW activations): inner = m, bias_count = channels.
void LaunchBiasActivate(float* y, int64_t n, const float* bias, int64_t inner,
                        int64_t bias_count, KernelActivation act, cudaStream_t stream);

// dy[i] ← dy[i] · act'(·) for i in [0, n), where y = act(·) is the layer's output.
// REQUIRES: act != kIdentity.
void LaunchActivationBackward(const float* y, float* dy, int64_t n, KernelActivation act,
                              cudaStream_t stream);

// db[c] = Σ_r d[r·cols + c]: the bias gradient of a dense layer, d [rows, cols].
void LaunchColumnSums(const float* d, int64_t rows, int64_t cols, float* db,
                      cudaStream_t stream);

// db[c] = Σ_i d[c·n + i]: the bias gradient of a convolution, d [channels, n]. partial is
// scratch of RowSumsScratch(channels, n) doubles.
int64_t RowSumsScratch(int64_t channels, int64_t n);
void LaunchRowSums(const float* d, int64_t channels, int64_t n, double* partial, float* db,
                   cudaStream_t stream);

// Softmax cross-entropy of logits z [rows, classes] against labels (device, each in
// [0, classes): the caller validates them). Per row r: loss_r = log Σ exp(z − m) −
// (z_label − m), correct_r = (first argmax == label). If dz is not null it receives
// (softmax(z_r) − onehot(label_r)) · scale (dz may alias z). row_loss (double) and
// row_correct (int) are scratch of `rows` entries; *sums (device) receives the totals.
void LaunchSoftmaxCrossEntropy(const float* z, const int32_t* labels, int64_t rows,
                               int64_t classes, float scale, float* dz, double* row_loss,
                               int32_t* row_correct, LossSums* sums, cudaStream_t stream);

// im2col of `batch` images: plane (c, n) is an in_height × in_width row-major image at
// in + c·c_stride + n·n_stride (NCHW input: c_stride = H·W, n_stride = C·H·W; CNHW
// activations: c_stride = batch·H·W, n_stride = H·W). Writes cols [in_channels·k·k,
// batch·conv_height·conv_width], zero outside the image.
void LaunchIm2Col(const float* in, int64_t batch, int64_t c_stride, int64_t n_stride,
                  const ConvGeometry& g, float* cols, cudaStream_t stream);

// The adjoint of Im2Col: each element of din (planes as above) = Σ of the cols entries
// copied from it. Overwrites every plane element (a gather: no atomics, deterministic).
void LaunchCol2Im(const float* cols, int64_t batch, int64_t c_stride, int64_t n_stride,
                  const ConvGeometry& g, float* din, cudaStream_t stream);

// 2×2 stride-2 max-pooling of `planes` h × w planes into (h/2) × (w/2) planes; argmax[o]
// is the index in its input plane of the maximum behind out[o].
void LaunchMaxPoolForward(const float* in, int64_t planes, int64_t h, int64_t w, float* out,
                          int32_t* argmax, cudaStream_t stream);

// din (planes of h × w) = dout routed to the argmax positions, 0 elsewhere (overwrites).
void LaunchMaxPoolBackward(const float* dout, const int32_t* argmax, int64_t planes,
                           int64_t h, int64_t w, float* din, cudaStream_t stream);

// CNHW activations [channels, batch, plane] → rows [batch, channels·plane] in (c, p) order
// (the CNN's input to its first fully connected layer), and back.
void LaunchCnhwToRows(const float* cnhw, int64_t channels, int64_t batch, int64_t plane,
                      float* rows, cudaStream_t stream);
void LaunchRowsToCnhw(const float* rows, int64_t channels, int64_t batch, int64_t plane,
                      float* cnhw, cudaStream_t stream);

}  // namespace asgd::models::cuda
