#include "experiments/run/evaluation.h"

#include <algorithm>

namespace asgd::experiments {

models::EvalResult EvaluateOn(models::Model& model, std::span<const float> params,
                              const datasets::Dataset& ds, const datasets::Dataset& train,
                              int64_t chunk) {
  model.Calibrate(params, train);
  const int64_t n = ds.num_examples;
  models::EvalResult total;
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t count = std::min(chunk, n - begin);
    total += model.Evaluate(params, datasets::ContiguousBatch(ds, begin, count));
  }
  return total;
}

void SaveFinalModel(const models::Model& model, std::span<const float> params,
                    const std::string& run_dir) {
  if (model.CanSave()) model.SaveAs(params, run_dir + "/" + kFinalModelFile);
}

void SaveBestModel(const models::Model& model, std::span<const float> params, double accuracy,
                   double best_before, const std::string& run_dir) {
  if (model.CanSave() && accuracy > best_before) {
    model.SaveAs(params, run_dir + "/" + kBestModelFile);
  }
}

}  // namespace asgd::experiments
