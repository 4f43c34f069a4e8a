#include "models/model.h"

#include "core/check.h"

namespace asgd::models {

std::string Model::Source() const { return "model.name = " + Name(); }

float Model::LossAndGradientReporting(std::span<const float> params,
                                      const datasets::BatchView& batch, std::span<float> grad,
                                      GradientReady& ready) {
  const float loss = LossAndGradient(params, batch, grad);
  ready.Ready({0, static_cast<int64_t>(grad.size())});
  return loss;
}

float Model::LossAndSparseGradient(std::span<const float> /*params*/,
                                   const datasets::BatchView& /*batch*/, SparseGradient* /*grad*/) {
  ASGD_CHECK(HasSparseGradient(), "model ", Name(), " has no sparse gradient");
  // A model that says it has a sparse gradient must override this method.
  ASGD_CHECK(false, "model ", Name(), " does not implement LossAndSparseGradient");
  return 0.0f;
}

void Model::SparseCoordinates(const datasets::BatchView& /*batch*/,
                              std::vector<int64_t>* /*out*/) const {
  ASGD_CHECK(false, "model ", Name(), " has no sparse gradient");
}

void Model::SaveAs(std::span<const float> /*params*/, const std::string& /*path*/) const {
  ASGD_CHECK(false, "model ", Name(), " cannot be saved as a file of its own");
}

}  // namespace asgd::models
