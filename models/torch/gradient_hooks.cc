#include "models/torch/gradient_hooks.h"

#include <utility>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "core/check.h"

namespace asgd::models {

GradientHooks::~GradientHooks() = default;

void GradientHooks::Hook(const std::vector<at::Tensor>& params, const std::vector<Range>& ranges) {
  ASGD_CHECK_EQ(params.size(), ranges.size(), "parameters and their ranges");
  ranges_ = ranges;
  accumulators_.resize(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    std::shared_ptr<torch::autograd::Node> node =
        torch::autograd::impl::grad_accumulator(params[i]);
    if (node == accumulators_[i]) continue;
    node->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs,
                  const torch::autograd::variable_list& /*inputs*/) {
          // Outside a Run (a plain LossAndGradient) the hook stays silent.
          if (reporting_ != nullptr) {
            reported_[i] = true;
            reporting_->Ready(ranges_[i]);
          }
          return outputs;
        }));
    accumulators_[i] = std::move(node);
  }
}

float GradientHooks::Run(GradientReady& ready, const std::function<float()>& step) {
  reported_.assign(ranges_.size(), false);
  reporting_ = &ready;
  float loss = 0;
  try {
    loss = step();
  } catch (...) {
    reporting_ = nullptr;
    throw;
  }
  reporting_ = nullptr;
  for (std::size_t i = 0; i < ranges_.size(); ++i) {
    if (!reported_[i]) ready.Ready(ranges_[i]);
  }
  return loss;
}

}  // namespace asgd::models
