// The CUDA multilayer perceptron and softmax regression: a CudaDenseStack on the batch.
#include <memory>

#include "core/check.h"
#include "models/cuda/factory.h"
#include "models/cuda/net.h"

namespace asgd::models::cuda {
namespace {

class CudaMlpNet final : public CudaNet {
 public:
  CudaMlpNet(const MlpArchitecture& arch, const ParamSpec& spec)
      : stack_(arch.inputs, arch.hidden, arch.activation, arch.classes, spec) {}

  float* Forward(const NetContext& ctx, const float* params, const float* x,
                 int64_t rows) override {
    return stack_.Forward(ctx, params, x, rows);
  }
  float* dlogits() override { return stack_.dlogits(); }
  void Backward(const NetContext& ctx, const float* params, const float* x, int64_t rows,
                float* grad) override {
    // The first layer needs no input gradient.
    stack_.Backward(ctx, params, x, rows, grad, nullptr);
  }

 private:
  CudaDenseStack stack_;
};

}  // namespace

std::unique_ptr<Model> NewCudaMlpModel(const MlpArchitecture& arch, int device) {
  for (int64_t h : arch.hidden) ASGD_CHECK_GT(h, 0, "hidden layer size");
  CudaModelParts parts;
  parts.spec = std::make_shared<const ParamSpec>(MlpParams(arch));
  parts.info.name = arch.hidden.empty() ? "softmax" : "mlp";
  parts.info.describe = DescribeMlp(arch);
  parts.info.features = arch.inputs;
  parts.info.classes = arch.classes;
  parts.make_net = [arch, spec = parts.spec] { return std::make_unique<CudaMlpNet>(arch, *spec); };
  return NewCudaModel(std::move(parts), device);
}

}  // namespace asgd::models::cuda
