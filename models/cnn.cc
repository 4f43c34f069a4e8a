#include "models/cnn.h"

#include "models/cpu_model.h"
#include "models/dense_stack.h"

namespace asgd::models {
namespace {

using layers::ConstMatMap;
using layers::MatMap;

template <typename T>
class CnnNet {
 public:
  CnnNet(const CnnArchitecture& arch, const ParamSpec& spec)
      : activation_(arch.activation),
        shapes_(CnnBlocks(arch)),
        stack_(CnnFlatFeatures(shapes_), arch.fc, arch.activation, arch.classes, spec) {
    for (std::size_t b = 0; b < shapes_.size(); ++b) {
      const std::string name = "conv" + std::to_string(b + 1);
      Block block;
      block.w = spec.layout.Get(name + ".weight").offset;
      block.b = spec.layout.Get(name + ".bias").offset;
      const ConvBlockShape& s = shapes_[b];
      block.end = block.b + s.out_channels;
      // Backward reports a block's weight and bias as one range.
      ASGD_CHECK_EQ(block.b, block.w + s.out_channels * s.in_channels * s.kernel * s.kernel, name,
                    " bias follows its weight");
      blocks_.push_back(std::move(block));
    }
  }

  EvalResult Run(const T* params, const datasets::BatchView& batch, T* grad,
                 GradientReady* ready = nullptr) {
    const int64_t rows = batch.size;
    Reserve(rows);
    // Activations are kept CNHW (plane (c, n) at c·rows·H·W + n·H·W) so that each
    // convolution is one GEMM over the whole batch; the input batch is NCHW.
    for (std::size_t b = 0; b < blocks_.size(); ++b) {
      const ConvBlockShape& s = shapes_[b];
      Block& block = blocks_[b];
      const int64_t k = s.in_channels * s.kernel * s.kernel;
      const int64_t n = rows * s.conv_height * s.conv_width;
      if (b == 0) {
        const int64_t plane = s.in_height * s.in_width;
        layers::Im2Col<T, float>(batch.x, rows, plane, s.in_channels * plane, s, block.cols.data());
      } else {
        const int64_t plane = s.in_height * s.in_width;
        layers::Im2Col<T, T>(blocks_[b - 1].pool.data(), rows, rows * plane, plane, s,
                             block.cols.data());
      }
      layers::ConvForward<T>(ConstMatMap<T>(params + block.w, s.out_channels, k), params + block.b,
                             ConstMatMap<T>(block.cols.data(), k, n), activation_,
                             MatMap<T>(block.act.data(), s.out_channels, n));
      layers::MaxPoolForward<T>(block.act.data(), s.out_channels * rows, s.conv_height,
                                s.conv_width, block.pool.data(), block.argmax.data());
    }
    // Flatten CNHW to [rows, C·H·W] in (c, i, j) order.
    const ConvBlockShape& last = shapes_.back();
    const int64_t p = last.pool_height * last.pool_width;
    const int64_t c_count = last.out_channels;
    const T* pooled = blocks_.back().pool.data();
    for (int64_t c = 0; c < c_count; ++c) {
      for (int64_t r = 0; r < rows; ++r) {
        const T* src = pooled + (c * rows + r) * p;
        std::copy(src, src + p, flat_.data() + r * c_count * p + c * p);
      }
    }
    const T* logits = stack_.Forward(params, flat_.data(), rows);
    EvalResult result;
    layers::SoftmaxCrossEntropy<T>(logits, batch.labels, rows, stack_.classes(),
                                   T(1) / static_cast<T>(rows), grad ? stack_.dlogits() : nullptr,
                                   &result);
    if (grad == nullptr) return result;

    stack_.Backward(params, flat_.data(), rows, grad, dflat_.data(), ready);
    T* dpooled = blocks_.back().dpool.data();
    for (int64_t c = 0; c < c_count; ++c) {
      for (int64_t r = 0; r < rows; ++r) {
        const T* src = dflat_.data() + r * c_count * p + c * p;
        std::copy(src, src + p, dpooled + (c * rows + r) * p);
      }
    }
    for (std::size_t b = blocks_.size(); b-- > 0;) {
      const ConvBlockShape& s = shapes_[b];
      Block& block = blocks_[b];
      const int64_t k = s.in_channels * s.kernel * s.kernel;
      const int64_t n = rows * s.conv_height * s.conv_width;
      layers::MaxPoolBackward<T>(block.dpool.data(), block.argmax.data(), s.out_channels * rows,
                                 s.conv_height, s.conv_width, dact_.data());
      // The first block needs no input gradient.
      T* dcols = b > 0 ? dcols_.data() : nullptr;
      layers::ConvBackward<T>(activation_, ConstMatMap<T>(block.act.data(), s.out_channels, n),
                              MatMap<T>(dact_.data(), s.out_channels, n),
                              ConstMatMap<T>(params + block.w, s.out_channels, k),
                              ConstMatMap<T>(block.cols.data(), k, n),
                              MatMap<T>(grad + block.w, s.out_channels, k), grad + block.b, dcols);
      if (ready != nullptr) ready->Ready({block.w, block.end - block.w});
      if (b > 0) {
        const int64_t plane = s.in_height * s.in_width;
        layers::Col2Im<T>(dcols, rows, rows * plane, plane, s, blocks_[b - 1].dpool.data());
      }
    }
    return result;
  }

 private:
  struct Block {
    int64_t w = 0, b = 0, end = 0;  // offsets of weight and bias, and where the bias ends
    AlignedVector<T> cols;          // im2col of the input [in_c·k·k, rows·oh·ow]
    AlignedVector<T> act;           // act(conv) [out_c, rows·oh·ow]
    AlignedVector<T> pool;          // pooled [out_c, rows·ph·pw]
    AlignedVector<int32_t> argmax;  // per pooled element, index in its act plane
    AlignedVector<T> dpool;         // dL/dpool
  };

  // Grows the scratch only when the batch is larger than any before.
  void Reserve(int64_t rows) {
    if (rows <= capacity_) return;
    auto grow = [rows](auto& v, int64_t per_example) {
      v.resize(static_cast<std::size_t>(rows * per_example));
    };
    int64_t dact = 0, dcols = 0;
    for (std::size_t b = 0; b < blocks_.size(); ++b) {
      const ConvBlockShape& s = shapes_[b];
      const int64_t conv = s.conv_height * s.conv_width;
      const int64_t pooled = s.out_channels * s.pool_height * s.pool_width;
      const int64_t cols = s.in_channels * s.kernel * s.kernel * conv;
      grow(blocks_[b].cols, cols);
      grow(blocks_[b].act, s.out_channels * conv);
      grow(blocks_[b].pool, pooled);
      grow(blocks_[b].argmax, pooled);
      grow(blocks_[b].dpool, pooled);
      dact = std::max(dact, s.out_channels * conv);
      if (b > 0) dcols = std::max(dcols, cols);
    }
    grow(dact_, dact);
    grow(dcols_, dcols);
    grow(flat_, stack_.inputs());
    grow(dflat_, stack_.inputs());
    capacity_ = rows;
  }

  Activation activation_;
  std::vector<ConvBlockShape> shapes_;
  std::vector<Block> blocks_;
  DenseStack<T> stack_;
  AlignedVector<T> dact_;   // dL/d(conv output) of the block being backpropagated
  AlignedVector<T> dcols_;  // dL/dcols of the block being backpropagated
  AlignedVector<T> flat_;   // [rows, flat] input of fc1
  AlignedVector<T> dflat_;
  int64_t capacity_ = 0;
};

}  // namespace

std::unique_ptr<Model> NewCpuCnnModel(const CnnArchitecture& arch) {
  auto spec = std::make_shared<const ParamSpec>(CnnParams(arch));
  CpuModelInfo info;
  info.name = "cnn";
  info.features = arch.in_channels * arch.height * arch.width;
  info.classes = arch.classes;
  info.describe = DescribeCnn(arch);
  return std::make_unique<CpuModelImpl<CnnArchitecture, CnnNet>>(arch, std::move(spec),
                                                                 std::move(info));
}

}  // namespace asgd::models
