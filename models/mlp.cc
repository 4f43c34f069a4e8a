#include "models/mlp.h"

#include "models/cpu_model.h"
#include "models/dense_stack.h"

namespace asgd::models {
namespace {

template <typename T>
class MlpNet {
 public:
  MlpNet(const MlpArchitecture& arch, const ParamSpec& spec)
      : stack_(arch.inputs, arch.hidden, arch.activation, arch.classes, spec) {}

  EvalResult Run(const T* params, const datasets::BatchView& batch, T* grad,
                 GradientReady* ready = nullptr) {
    const int64_t rows = batch.size;
    const T* x = PromoteInput<T>(batch.x, rows * stack_.inputs(), &x_);
    const T* logits = stack_.Forward(params, x, rows);
    EvalResult result;
    layers::SoftmaxCrossEntropy<T>(logits, batch.labels, rows, stack_.classes(),
                                   T(1) / static_cast<T>(rows), grad ? stack_.dlogits() : nullptr,
                                   &result);
    // The first layer needs no input gradient.
    if (grad != nullptr) stack_.Backward(params, x, rows, grad, nullptr, ready);
    return result;
  }

 private:
  DenseStack<T> stack_;
  AlignedVector<T> x_;  // the input promoted to T (unused when T is float)
};

}  // namespace

std::unique_ptr<Model> NewCpuMlpModel(const MlpArchitecture& arch) {
  for (int64_t h : arch.hidden) ASGD_CHECK_GT(h, 0, "hidden layer size");
  auto spec = std::make_shared<const ParamSpec>(MlpParams(arch));
  CpuModelInfo info;
  info.name = arch.hidden.empty() ? "softmax" : "mlp";
  info.features = arch.inputs;
  info.classes = arch.classes;
  info.describe = DescribeMlp(arch);
  return std::make_unique<CpuModelImpl<MlpArchitecture, MlpNet>>(arch, std::move(spec),
                                                                 std::move(info));
}

}  // namespace asgd::models
