// Internal to models/ (and its tests): the layer kernels of the CPU models, on Eigen.
//
// Every kernel is a template on the scalar type T. The models run them in float; the
// tests also run them in double to check gradients against finite differences with
// little rounding noise. Matrices are row-major Eigen maps over caller-owned memory (the
// flat parameter and gradient buffers, or a model's scratch buffers); no kernel
// allocates. A batch of activations is a [rows, features] matrix, one example per row.
//
// Conventions shared with the CUDA models (see models/architecture.h for the layouts):
//   * max-pooling is 2×2 with stride 2; an odd last row or column is dropped; ties go to
//     the first maximum in the order (0,0), (0,1), (1,0), (1,1) of the window.
//   * relu'(0) = 0.
//   * The loss is the mean over the batch; logits gradients are scaled by 1 / rows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "core/check.h"
#include "datasets/dataset.h"
#include "models/architecture.h"
#include "models/eigen.h"
#include "models/model.h"

namespace asgd::models::layers {

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MatMap = Eigen::Map<RowMatrix<T>>;
template <typename T>
using ConstMatMap = Eigen::Map<const RowMatrix<T>>;
template <typename T>
using RowVector = Eigen::Matrix<T, 1, Eigen::Dynamic>;
template <typename T>
using VecMap = Eigen::Map<RowVector<T>>;
template <typename T>
using ConstVecMap = Eigen::Map<const RowVector<T>>;

// ---- Elementwise nonlinearities --------------------------------------------------

// y ← act(y + b) for n elements (act = identity when nullopt), in one pass.
template <typename T>
inline void BiasActivate(std::optional<Activation> act, const T* b, T* y, int64_t n) {
  if (!act) {
    for (int64_t i = 0; i < n; ++i) y[i] += b[i];
    return;
  }
  switch (*act) {
    case Activation::kRelu:
      for (int64_t i = 0; i < n; ++i) {
        const T z = y[i] + b[i];
        y[i] = z > T(0) ? z : T(0);
      }
      break;
    case Activation::kTanh: {
      Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> v(y, n);
      v = (v + Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(b, n)).tanh();
      break;
    }
    case Activation::kSigmoid: {
      Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> v(y, n);
      v = (v + Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(b, n)).logistic();
      break;
    }
  }
}

// As BiasActivate with one bias for all n elements (a convolution channel).
template <typename T>
inline void ScalarBiasActivate(std::optional<Activation> act, T b, T* y, int64_t n) {
  Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> v(y, n);
  if (!act) {
    v += b;
    return;
  }
  switch (*act) {
    case Activation::kRelu:
      for (int64_t i = 0; i < n; ++i) {
        const T z = y[i] + b;
        y[i] = z > T(0) ? z : T(0);
      }
      break;
    case Activation::kTanh:
      v = (v + b).tanh();
      break;
    case Activation::kSigmoid:
      v = (v + b).logistic();
      break;
  }
}

// dy ← dy ⊙ act'(·) for n elements, where y = act(·) is the layer's output.
template <typename T>
inline void ActivationBackward(Activation act, const T* y, T* dy, int64_t n) {
  switch (act) {
    case Activation::kRelu:
      for (int64_t i = 0; i < n; ++i) dy[i] = y[i] > T(0) ? dy[i] : T(0);
      break;
    case Activation::kTanh:
      for (int64_t i = 0; i < n; ++i) dy[i] *= T(1) - y[i] * y[i];
      break;
    case Activation::kSigmoid:
      for (int64_t i = 0; i < n; ++i) dy[i] *= y[i] * (T(1) - y[i]);
      break;
  }
}

// ---- Fully connected layer ---------------------------------------------------------

// y = act(x·w + b). x [rows, in], w [in, out], b [out], y [rows, out].
template <typename T>
void DenseForward(ConstMatMap<T> x, ConstMatMap<T> w, const T* b, std::optional<Activation> act,
                  MatMap<T> y) {
  y.noalias() = x * w;
  const int64_t out = y.cols();
  for (int64_t r = 0; r < y.rows(); ++r) BiasActivate(act, b, y.data() + r * out, out);
}

// Given y = act(x·w + b) and dy = dL/dy, turns dy into dL/d(x·w + b) in place (act =
// identity when nullopt) and writes db = its column sums (one pass over dy).
template <typename T>
void DenseActivationBackward(std::optional<Activation> act, ConstMatMap<T> y, MatMap<T> dy,
                             T* db) {
  const int64_t out = dy.cols();
  std::fill(db, db + out, T(0));
  for (int64_t r = 0; r < dy.rows(); ++r) {
    T* d = dy.data() + r * out;
    if (act) ActivationBackward(*act, y.data() + r * out, d, out);
    for (int64_t i = 0; i < out; ++i) db[i] += d[i];
  }
}

// dw = xᵀ·dz; dx = dz·wᵀ unless dx is null (the first layer needs no input gradient).
template <typename T>
void DenseBackward(ConstMatMap<T> x, ConstMatMap<T> w, ConstMatMap<T> dz, MatMap<T> dw,
                   T* dx) {
  dw.noalias() = x.transpose() * dz;
  if (dx != nullptr) {
    MatMap<T>(dx, dz.rows(), w.rows()).noalias() = dz * w.transpose();
  }
}

// ---- Softmax cross-entropy -----------------------------------------------------------

// For each row r of the logits z [rows, classes]:
//   loss_r = log Σ_c exp(z_rc) − z_r,label (computed as log Σ exp(z − m) − (z_label − m),
//            m = max z_r),
//   correct when the first argmax equals the label.
// Adds Σ loss_r, the correct count and rows to *result. If dz is not null, writes
//   dz_r = (softmax(z_r) − onehot(label_r)) · scale; dz may alias z.
// Throws InvariantError for a label outside [0, classes).
template <typename T>
void SoftmaxCrossEntropy(const T* z, const int32_t* labels, int64_t rows, int64_t classes,
                         T scale, T* dz, EvalResult* result) {
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const T* zr = z + r * classes;
    const int32_t label = labels[r];
    ASGD_CHECK(label >= 0 && label < classes, "label ", label, " of example ", r,
               " outside [0, ", classes, ")");
    int64_t argmax = 0;
    T m = zr[0];
    for (int64_t c = 1; c < classes; ++c) {
      if (zr[c] > m) {
        m = zr[c];
        argmax = c;
      }
    }
    // Shifted by the maximum, so exp never overflows and the probabilities are not
    // rounded against a large log-sum-exp.
    const T z_label = zr[label];
    T sum = T(0);
    T* dr = dz != nullptr ? dz + r * classes : nullptr;
    if (dr != nullptr) {
      for (int64_t c = 0; c < classes; ++c) {
        dr[c] = std::exp(zr[c] - m);
        sum += dr[c];
      }
    } else {
      for (int64_t c = 0; c < classes; ++c) sum += std::exp(zr[c] - m);
    }
    loss_sum += static_cast<double>(std::log(sum) - (z_label - m));
    correct += argmax == label ? 1 : 0;
    if (dr != nullptr) {
      const T inv = scale / sum;
      for (int64_t c = 0; c < classes; ++c) dr[c] *= inv;
      dr[label] -= scale;
    }
  }
  result->loss_sum += loss_sum;
  result->correct += correct;
  result->count += rows;
}

// ---- Convolution (im2col + GEMM) and max-pooling -------------------------------------

// Input planes: plane (c, n) — channel c of example n — is an s.in_height × s.in_width
// row-major image at in + c·c_stride + n·n_stride. (A batch from a dataset is NCHW:
// c_stride = H·W, n_stride = C·H·W; the models keep later activations CNHW: c_stride =
// batch·H·W, n_stride = H·W.)
//
// Im2Col writes cols [in_channels·k·k, batch·conv_height·conv_width], row-major: row
// (c·k + u)·k + v, column n·oh·ow + i·ow + j holds input (c, n) at (i + u − pad,
// j + v − pad), or 0 outside the image. Then weight [out_c, in_c·k·k] · cols is the
// convolution's output in CNHW order.
template <typename T, typename In>
void Im2Col(const In* in, int64_t batch, int64_t c_stride, int64_t n_stride,
            const ConvBlockShape& s, T* cols) {
  const int64_t k = s.kernel, oh = s.conv_height, ow = s.conv_width;
  const int64_t h = s.in_height, w = s.in_width;
  T* dst = cols;
  for (int64_t c = 0; c < s.in_channels; ++c) {
    for (int64_t u = 0; u < k; ++u) {
      for (int64_t v = 0; v < k; ++v) {
        // Output columns j whose input column j + v − pad lies inside the image.
        const int64_t j0 = std::clamp<int64_t>(s.pad - v, 0, ow);
        const int64_t j1 = std::clamp<int64_t>(w + s.pad - v, j0, ow);
        for (int64_t n = 0; n < batch; ++n) {
          const In* plane = in + c * c_stride + n * n_stride;
          for (int64_t i = 0; i < oh; ++i, dst += ow) {
            const int64_t ii = i + u - s.pad;
            if (ii < 0 || ii >= h) {
              std::fill(dst, dst + ow, T(0));
              continue;
            }
            const In* src = plane + ii * w;
            const int64_t shift = v - s.pad;
            std::fill(dst, dst + j0, T(0));
            for (int64_t j = j0; j < j1; ++j) dst[j] = static_cast<T>(src[j + shift]);
            std::fill(dst + j1, dst + ow, T(0));
          }
        }
      }
    }
  }
}

// The adjoint of Im2Col: din (planes as for Im2Col) = Σ of the cols entries that were
// copied from each input element. Overwrites every plane of din.
template <typename T>
void Col2Im(const T* cols, int64_t batch, int64_t c_stride, int64_t n_stride,
            const ConvBlockShape& s, T* din) {
  const int64_t k = s.kernel, oh = s.conv_height, ow = s.conv_width;
  const int64_t h = s.in_height, w = s.in_width;
  for (int64_t c = 0; c < s.in_channels; ++c) {
    for (int64_t n = 0; n < batch; ++n) {
      T* plane = din + c * c_stride + n * n_stride;
      std::fill(plane, plane + h * w, T(0));
    }
  }
  const T* src = cols;
  for (int64_t c = 0; c < s.in_channels; ++c) {
    for (int64_t u = 0; u < k; ++u) {
      for (int64_t v = 0; v < k; ++v) {
        const int64_t j0 = std::clamp<int64_t>(s.pad - v, 0, ow);
        const int64_t j1 = std::clamp<int64_t>(w + s.pad - v, j0, ow);
        for (int64_t n = 0; n < batch; ++n) {
          T* plane = din + c * c_stride + n * n_stride;
          for (int64_t i = 0; i < oh; ++i, src += ow) {
            const int64_t ii = i + u - s.pad;
            if (ii < 0 || ii >= h) continue;
            T* dst = plane + ii * w;
            const int64_t shift = v - s.pad;
            for (int64_t j = j0; j < j1; ++j) dst[j + shift] += src[j];
          }
        }
      }
    }
  }
}

// out [c, n] = act(weight · cols + bias[c]); weight [out_c, K], cols [K, n], out [out_c, n].
template <typename T>
void ConvForward(ConstMatMap<T> weight, const T* bias, ConstMatMap<T> cols,
                 std::optional<Activation> act, MatMap<T> out) {
  out.noalias() = weight * cols;
  const int64_t n = out.cols();
  for (int64_t c = 0; c < out.rows(); ++c) ScalarBiasActivate(act, bias[c], out.data() + c * n, n);
}

// Given out = act(weight · cols + bias) and dout = dL/dout: turns dout into dL/d(pre-
// activation) in place, writes db[c] = its row sums, dw = dout · colsᵀ and, unless dcols
// is null, dcols = weightᵀ · dout.
template <typename T>
void ConvBackward(std::optional<Activation> act, ConstMatMap<T> out, MatMap<T> dout,
                  ConstMatMap<T> weight, ConstMatMap<T> cols, MatMap<T> dw, T* db, T* dcols) {
  const int64_t n = dout.cols();
  for (int64_t c = 0; c < dout.rows(); ++c) {
    T* d = dout.data() + c * n;
    if (act) ActivationBackward(*act, out.data() + c * n, d, n);
    db[c] = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(d, n).sum();
  }
  dw.noalias() = dout * cols.transpose();
  if (dcols != nullptr) {
    MatMap<T>(dcols, weight.cols(), n).noalias() = weight.transpose() * dout;
  }
}

// 2×2 max-pooling with stride 2 of `planes` row-major h × w planes into (h/2) × (w/2)
// planes; argmax[o] is the index inside its input plane of the maximum behind out[o].
template <typename T>
void MaxPoolForward(const T* in, int64_t planes, int64_t h, int64_t w, T* out,
                    int32_t* argmax) {
  const int64_t ph = h / 2, pw = w / 2;
  for (int64_t p = 0; p < planes; ++p) {
    const T* src = in + p * h * w;
    for (int64_t i = 0; i < ph; ++i) {
      const T* r0 = src + 2 * i * w;
      const T* r1 = r0 + w;
      for (int64_t j = 0; j < pw; ++j) {
        const int64_t base = 2 * i * w + 2 * j;
        T m = r0[2 * j];
        int64_t at = base;
        if (r0[2 * j + 1] > m) {
          m = r0[2 * j + 1];
          at = base + 1;
        }
        if (r1[2 * j] > m) {
          m = r1[2 * j];
          at = base + w;
        }
        if (r1[2 * j + 1] > m) {
          m = r1[2 * j + 1];
          at = base + w + 1;
        }
        *out++ = m;
        *argmax++ = static_cast<int32_t>(at);
      }
    }
  }
}

// din (planes of h × w) = dout routed to the argmax positions, 0 elsewhere.
template <typename T>
void MaxPoolBackward(const T* dout, const int32_t* argmax, int64_t planes, int64_t h, int64_t w,
                     T* din) {
  const int64_t pooled = (h / 2) * (w / 2);
  std::fill(din, din + planes * h * w, T(0));
  for (int64_t p = 0; p < planes; ++p) {
    T* dst = din + p * h * w;
    for (int64_t o = 0; o < pooled; ++o) dst[*argmax++] = *dout++;
  }
}

// ---- Sparse binary logistic regression ------------------------------------------------

// z_r = b + Σ_k w[indices_k] · values_k over row r's CSR entries. Throws InvariantError
// for a feature index outside [0, features).
template <typename T>
void SparseLogits(const datasets::BatchView& batch, const T* w, T b, int64_t features, T* z) {
  for (int64_t r = 0; r < batch.size; ++r) {
    T acc = b;
    for (int64_t k = batch.indptr[r]; k < batch.indptr[r + 1]; ++k) {
      const int32_t j = batch.indices[k];
      ASGD_CHECK(j >= 0 && j < features, "feature index ", j, " of example ", r,
                 " outside [0, ", features, ")");
      acc += w[j] * static_cast<T>(batch.values[k]);
    }
    z[r] = acc;
  }
}

// Binary cross-entropy with logits: loss_r = max(z, 0) − y·z + log(1 + exp(−|z|)),
// correct when (z > 0) == (y == 1). Adds the sums to *result; if dz is not null writes
// dz_r = (sigmoid(z_r) − y_r) · scale. Throws InvariantError for a label not 0 or 1.
template <typename T>
void BinaryCrossEntropy(const T* z, const int32_t* labels, int64_t rows, T scale, T* dz,
                        EvalResult* result) {
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t label = labels[r];
    ASGD_CHECK(label == 0 || label == 1, "label ", label, " of example ", r, " is not 0 or 1");
    const T y = static_cast<T>(label);
    const T zr = z[r];
    loss_sum += static_cast<double>(std::max(zr, T(0)) - y * zr + std::log1p(std::exp(-std::abs(zr))));
    correct += (zr > T(0)) == (label == 1) ? 1 : 0;
    if (dz != nullptr) {
      const T e = std::exp(-std::abs(zr));
      const T p = zr >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
      dz[r] = (p - y) * scale;
    }
  }
  result->loss_sum += loss_sum;
  result->correct += correct;
  result->count += rows;
}

}  // namespace asgd::models::layers
