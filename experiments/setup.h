// Turning a Config into the options structs of the libraries (datasets, models,
// algorithms). Only experiments/ reads configuration; libraries take these structs.
#pragma once

#include <string>
#include <vector>

#include "algorithms/optimizer.h"
#include "algorithms/schedule.h"
#include "algorithms/strategy.h"
#include "datasets/loader.h"
#include "experiments/config.h"
#include "models/factory.h"

namespace asgd::experiments {

datasets::DataOptions BuildDataOptions(const Config& config,
                                       const std::vector<std::string>& search_dirs);
models::ModelOptions BuildModelOptions(const Config& config);
models::InputSpec InputSpecFor(const datasets::Dataset& train);
algorithms::OptimizerOptions BuildOptimizerOptions(const Config& config);

// The options of the distributed strategy named by algorithm.name, with the checks that
// involve several keys (replicas_to_aggregate <= workers, one worker_learning_rates entry
// per worker, softsync <= workers): ConfigError naming the key.
algorithms::StrategyOptions BuildStrategyOptions(const Config& config);
// The learning-rate schedule: algorithm.lr_decay, and with algorithm.linear_scaling the
// factor k (the mini-batches one update aggregates) and algorithm.warmup_epochs.
algorithms::ScheduleOptions BuildScheduleOptions(const Config& config);
// Worker w's base learning rate: algorithm.worker_learning_rates[w], or learning_rate.
double WorkerLearningRate(const Config& config, int worker);

}  // namespace asgd::experiments
