// CudaDenseStack (net.h): the CPU DenseStack's passes with cuBLAS GEMMs and the kernels
// of kernels.h, in the same order, so that the two are easy to compare line by line.
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "models/cuda/gemm.h"
#include "models/cuda/kernels.h"
#include "models/cuda/net.h"

namespace asgd::models::cuda {

CudaDenseStack::CudaDenseStack(int64_t inputs, const std::vector<int64_t>& hidden,
                               Activation activation, int classes, const ParamSpec& spec)
    : activation_(ToKernel(activation)) {
  int64_t in = inputs;
  for (std::size_t l = 0; l <= hidden.size(); ++l) {
    const int64_t out = l < hidden.size() ? hidden[l] : classes;
    const std::string name = "fc" + std::to_string(l + 1);
    const TensorSpec& w = spec.layout.Get(name + ".weight");
    const TensorSpec& b = spec.layout.Get(name + ".bias");
    ASGD_CHECK(w.shape == (std::vector<int64_t>{in, out}), name, " shape");
    // Backward reports a layer's weight and bias as one range.
    ASGD_CHECK_EQ(b.offset, w.offset + in * out, name, " bias follows its weight");
    layers_.push_back({in, out, w.offset, b.offset, {}, {}});
    in = out;
  }
}

void CudaDenseStack::Reserve(int64_t rows) {
  if (rows <= capacity_) return;
  for (Layer& layer : layers_) {
    layer.h.Resize(rows * layer.out);
    layer.d.Resize(rows * layer.out);
  }
  capacity_ = rows;
}

float* CudaDenseStack::Forward(const NetContext& ctx, const float* params, const float* x,
                               int64_t rows) {
  Reserve(rows);
  const float* in = x;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = layers_[l];
    const bool last = l + 1 == layers_.size();
    // h = x·W, then h ← act(h + b).
    RowMajorGemm(ctx.cublas, Op::kN, Op::kN, rows, layer.out, layer.in, in, params + layer.w,
                 layer.h.get());
    LaunchBiasActivate(layer.h.get(), rows * layer.out, params + layer.b, 1, layer.out,
                       last ? KernelActivation::kIdentity : activation_, ctx.stream);
    in = layer.h.get();
  }
  return layers_.back().h.get();
}

void CudaDenseStack::Backward(const NetContext& ctx, const float* params, const float* x,
                              int64_t rows, float* grad, float* dx) {
  for (std::size_t l = layers_.size(); l-- > 0;) {
    Layer& layer = layers_[l];
    const bool last = l + 1 == layers_.size();
    if (!last)
      LaunchActivationBackward(layer.h.get(), layer.d.get(), rows * layer.out, activation_,
                               ctx.stream);
    LaunchColumnSums(layer.d.get(), rows, layer.out, grad + layer.b, ctx.stream);
    const float* in = l == 0 ? x : layers_[l - 1].h.get();
    // dW = inᵀ·dz; d_in = dz·Wᵀ (none for the first layer unless dx is asked for).
    RowMajorGemm(ctx.cublas, Op::kT, Op::kN, layer.in, layer.out, rows, in, layer.d.get(),
                 grad + layer.w);
    if (ctx.layer_done) ctx.layer_done({layer.w, layer.b + layer.out - layer.w});
    float* d_in = l == 0 ? dx : layers_[l - 1].d.get();
    if (d_in != nullptr) {
      RowMajorGemm(ctx.cublas, Op::kN, Op::kT, rows, layer.in, layer.out, layer.d.get(),
                   params + layer.w, d_in);
    }
  }
}

}  // namespace asgd::models::cuda
