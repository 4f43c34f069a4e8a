// Evaluating a model's parameters on a dataset, in chunks, without copying the data.
#pragma once

#include <cstdint>
#include <span>

#include "datasets/dataset.h"
#include "models/model.h"

namespace asgd::experiments {

// Loss sum and correct count of params on the first `limit` examples of ds (all when
// limit <= 0 or larger than the dataset), evaluated in chunks of `chunk` examples.
models::EvalResult EvaluateOn(models::Model& model, std::span<const float> params,
                              const datasets::Dataset& ds, int64_t limit = 0, int64_t chunk = 1000);

}  // namespace asgd::experiments
