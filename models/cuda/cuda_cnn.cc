// The CUDA LeNet-5-style network: the CPU CnnNet (models/cnn.cc) step for step —
// im2col + one GEMM per convolution over the whole batch with activations kept CNHW,
// 2×2 max-pooling, a CudaDenseStack on the flattened features.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "models/cuda/factory.h"
#include "models/cuda/gemm.h"
#include "models/cuda/kernels.h"
#include "models/cuda/net.h"

namespace asgd::models::cuda {
namespace {

ConvGeometry Geometry(const ConvBlockShape& s) {
  return {s.in_channels, s.in_height, s.in_width, s.kernel, s.pad, s.conv_height, s.conv_width};
}

class CudaCnnNet final : public CudaNet {
 public:
  CudaCnnNet(const CnnArchitecture& arch, const ParamSpec& spec)
      : activation_(ToKernel(arch.activation)),
        shapes_(CnnBlocks(arch)),
        stack_(CnnFlatFeatures(shapes_), arch.fc, arch.activation, arch.classes, spec) {
    for (std::size_t b = 0; b < shapes_.size(); ++b) {
      const std::string name = "conv" + std::to_string(b + 1);
      const ConvBlockShape& s = shapes_[b];
      // im2col launches one grid row per cols row.
      ASGD_CHECK_LE(s.in_channels * s.kernel * s.kernel, 65535, name, " im2col rows");
      Block block;
      block.w = spec.layout.Get(name + ".weight").offset;
      block.b = spec.layout.Get(name + ".bias").offset;
      // Backward reports a block's weight and bias as one range.
      ASGD_CHECK_EQ(block.b, block.w + s.out_channels * s.in_channels * s.kernel * s.kernel, name,
                    " bias follows its weight");
      blocks_.push_back(std::move(block));
    }
  }

  float* Forward(const NetContext& ctx, const float* params, const float* x,
                 int64_t rows) override {
    Reserve(rows);
    for (std::size_t b = 0; b < blocks_.size(); ++b) {
      const ConvBlockShape& s = shapes_[b];
      Block& block = blocks_[b];
      const int64_t k = s.in_channels * s.kernel * s.kernel;
      const int64_t n = rows * s.conv_height * s.conv_width;
      const int64_t plane = s.in_height * s.in_width;
      if (b == 0) {
        // The batch is NCHW.
        LaunchIm2Col(x, rows, plane, s.in_channels * plane, Geometry(s), block.cols.get(),
                     ctx.stream);
      } else {
        LaunchIm2Col(blocks_[b - 1].pool.get(), rows, rows * plane, plane, Geometry(s),
                     block.cols.get(), ctx.stream);
      }
      // act [out_c, n] = act(W [out_c, k] · cols [k, n] + b).
      RowMajorGemm(ctx.cublas, Op::kN, Op::kN, s.out_channels, n, k, params + block.w,
                   block.cols.get(), block.act.get());
      LaunchBiasActivate(block.act.get(), s.out_channels * n, params + block.b, n, s.out_channels,
                         activation_, ctx.stream);
      LaunchMaxPoolForward(block.act.get(), s.out_channels * rows, s.conv_height, s.conv_width,
                           block.pool.get(), block.argmax.get(), ctx.stream);
    }
    const ConvBlockShape& last = shapes_.back();
    LaunchCnhwToRows(blocks_.back().pool.get(), last.out_channels, rows,
                     last.pool_height * last.pool_width, flat_.get(), ctx.stream);
    return stack_.Forward(ctx, params, flat_.get(), rows);
  }

  float* dlogits() override { return stack_.dlogits(); }

  void Backward(const NetContext& ctx, const float* params, const float* /*x*/, int64_t rows,
                float* grad) override {
    stack_.Backward(ctx, params, flat_.get(), rows, grad, dflat_.get());
    const ConvBlockShape& last = shapes_.back();
    LaunchRowsToCnhw(dflat_.get(), last.out_channels, rows, last.pool_height * last.pool_width,
                     blocks_.back().dpool.get(), ctx.stream);
    for (std::size_t b = blocks_.size(); b-- > 0;) {
      const ConvBlockShape& s = shapes_[b];
      Block& block = blocks_[b];
      const int64_t k = s.in_channels * s.kernel * s.kernel;
      const int64_t n = rows * s.conv_height * s.conv_width;
      LaunchMaxPoolBackward(block.dpool.get(), block.argmax.get(), s.out_channels * rows,
                            s.conv_height, s.conv_width, dact_.get(), ctx.stream);
      LaunchActivationBackward(block.act.get(), dact_.get(), s.out_channels * n, activation_,
                               ctx.stream);
      LaunchRowSums(dact_.get(), s.out_channels, n, partial_.get(), grad + block.b, ctx.stream);
      // dW [out_c, k] = dact [out_c, n] · cols [k, n]ᵀ.
      RowMajorGemm(ctx.cublas, Op::kN, Op::kT, s.out_channels, k, n, dact_.get(), block.cols.get(),
                   grad + block.w);
      if (ctx.layer_done) ctx.layer_done({block.w, block.b + s.out_channels - block.w});
      // The first block needs no input gradient.
      if (b > 0) {
        // dcols [k, n] = W [out_c, k]ᵀ · dact [out_c, n], then back to the planes of the
        // previous block's pooled output.
        RowMajorGemm(ctx.cublas, Op::kT, Op::kN, k, n, s.out_channels, params + block.w,
                     dact_.get(), dcols_.get());
        const int64_t plane = s.in_height * s.in_width;
        LaunchCol2Im(dcols_.get(), rows, rows * plane, plane, Geometry(s), dcols_target(b),
                     ctx.stream);
      }
    }
  }

 private:
  struct Block {
    int64_t w = 0, b = 0;          // offsets of weight and bias
    DeviceBuffer<float> cols;      // im2col of the input [in_c·k·k, rows·oh·ow]
    DeviceBuffer<float> act;       // act(conv) [out_c, rows·oh·ow]
    DeviceBuffer<float> pool;      // pooled [out_c, rows·ph·pw]
    DeviceBuffer<int32_t> argmax;  // per pooled element, index in its act plane
    DeviceBuffer<float> dpool;     // dL/dpool
  };

  // Where Col2Im of block b writes: dL/d(pooled output of block b − 1).
  float* dcols_target(std::size_t b) { return blocks_[b - 1].dpool.get(); }

  // Grows the scratch only when the batch is larger than any before.
  void Reserve(int64_t rows) {
    if (rows <= capacity_) return;
    int64_t dact = 0, dcols = 0, partial = 0;
    for (std::size_t b = 0; b < blocks_.size(); ++b) {
      const ConvBlockShape& s = shapes_[b];
      const int64_t conv = s.conv_height * s.conv_width;
      const int64_t pooled = s.out_channels * s.pool_height * s.pool_width;
      const int64_t cols = s.in_channels * s.kernel * s.kernel * conv;
      blocks_[b].cols.Resize(rows * cols);
      blocks_[b].act.Resize(rows * s.out_channels * conv);
      blocks_[b].pool.Resize(rows * pooled);
      blocks_[b].argmax.Resize(rows * pooled);
      blocks_[b].dpool.Resize(rows * pooled);
      dact = std::max(dact, rows * s.out_channels * conv);
      if (b > 0) dcols = std::max(dcols, rows * cols);
      partial = std::max(partial, RowSumsScratch(s.out_channels, rows * conv));
    }
    dact_.Resize(dact);
    dcols_.Resize(dcols);
    partial_.Resize(partial);
    flat_.Resize(rows * stack_.inputs());
    dflat_.Resize(rows * stack_.inputs());
    capacity_ = rows;
  }

  KernelActivation activation_;
  std::vector<ConvBlockShape> shapes_;
  std::vector<Block> blocks_;
  CudaDenseStack stack_;
  DeviceBuffer<float> dact_;      // dL/d(conv output) of the block being backpropagated
  DeviceBuffer<float> dcols_;     // dL/dcols of the block being backpropagated
  DeviceBuffer<double> partial_;  // bias-gradient partial sums
  DeviceBuffer<float> flat_;      // [rows, flat] input of fc1
  DeviceBuffer<float> dflat_;
  int64_t capacity_ = 0;
};

}  // namespace

std::unique_ptr<Model> NewCudaCnnModel(const CnnArchitecture& arch, int device) {
  CudaModelParts parts;
  parts.spec = std::make_shared<const ParamSpec>(CnnParams(arch));
  parts.info.name = "cnn";
  parts.info.describe = DescribeCnn(arch);
  parts.info.features = arch.in_channels * arch.height * arch.width;
  parts.info.classes = arch.classes;
  parts.make_net = [arch, spec = parts.spec] { return std::make_unique<CudaCnnNet>(arch, *spec); };
  return NewCudaModel(std::move(parts), device);
}

}  // namespace asgd::models::cuda
