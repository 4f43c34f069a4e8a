// GradientHooks: the TorchScript model's side of Model::LossAndGradientReporting. Each
// parameter's range of the flat gradient is reported (GradientReady::Ready) when autograd
// has accumulated its gradient: a post hook on the parameter's AccumulateGrad node, which
// runs after the node has added every contribution (libtorch 1.13 has no post-accumulate-
// grad hook on tensors; PyTorch's DDP Reducer hooks the same node). A parameter the loss
// does not depend on gets no AccumulateGrad call: its range (zeros) is reported after
// backward, as DDP's find_unused_parameters does.
//
// Internal to models/torch/ (it includes libtorch headers; torchscript_model.h does not).
// Thread-safety: one per model instance, used by the thread that runs its backward.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/gradient_ready.h"
#include "core/param_layout.h"

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace asgd::models {

class GradientHooks {
 public:
  GradientHooks() = default;
  // The hooks hold this object's address: it stays where it was made.
  GradientHooks(const GradientHooks&) = delete;
  GradientHooks& operator=(const GradientHooks&) = delete;
  ~GradientHooks();

  // Hooks each parameter's AccumulateGrad node, once per node: the node lives as long as
  // something holds it (the parameter holds only a weak pointer), so this object keeps
  // it; a parameter whose node was replaced gets the hook on its new one. ranges[i] is
  // params[i]'s range of the flat gradient. REQUIRES params.size() == ranges.size(), the
  // same parameters (in the same order) at every call.
  void Hook(const std::vector<at::Tensor>& params, const std::vector<Range>& ranges);

  // Runs `step` (forward and backward; returns the loss) with the hooks reporting to
  // `ready`, then reports the ranges no hook reported, and returns the loss. If `step`
  // throws, nothing more is reported and the exception propagates. REQUIRES Hook was
  // called.
  float Run(GradientReady& ready, const std::function<float()>& step);

 private:
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<Range> ranges_;
  GradientReady* reporting_ = nullptr;  // the current Run's receiver, null outside one
  std::vector<bool> reported_;          // which parameters the current Run was told of
};

}  // namespace asgd::models
