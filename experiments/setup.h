// Turning a Config into the options structs of the libraries (datasets, models,
// algorithms). Only experiments/ reads configuration; libraries take these structs.
#pragma once

#include <string>
#include <vector>

#include "algorithms/optimizer.h"
#include "datasets/loader.h"
#include "experiments/config.h"
#include "models/factory.h"

namespace asgd::experiments {

datasets::DataOptions BuildDataOptions(const Config& config,
                                       const std::vector<std::string>& search_dirs);
models::ModelOptions BuildModelOptions(const Config& config);
models::InputSpec InputSpecFor(const datasets::Dataset& train);
algorithms::OptimizerOptions BuildOptimizerOptions(const Config& config);

}  // namespace asgd::experiments
