// What every in-process driver (sequential, threads, collective, simulated) reads and
// validates before it creates the run folder, and the convergence row and progress line of
// one evaluation.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "algorithms/optimizer.h"
#include "algorithms/schedule.h"
#include "algorithms/strategy.h"
#include "datasets/loader.h"
#include "experiments/config/config.h"
#include "experiments/record/metrics.h"
#include "experiments/record/progress.h"
#include "experiments/record/run_core.h"
#include "experiments/record/run_dir.h"
#include "experiments/run/run_plan.h"
#include "experiments/run/runner.h"
#include "experiments/run/worker_loop.h"
#include "models/device.h"
#include "models/model.h"

namespace asgd::experiments {

// What a run trains: its plan (the config resolved), the data, the model and the options
// that need the data to be checked.
struct Problem {
  RunPlan plan;
  datasets::TrainTest data;
  std::unique_ptr<models::Model> model;  // the evaluator's, on the CPU
  int64_t n_params = 0;
  algorithms::OptimizerOptions optimizer;        // validated
  algorithms::StrategyOptions strategy_options;  // validated by a server rule
  algorithms::ScheduleOptions schedule;
  std::vector<std::vector<int64_t>> partitions;  // each worker's training examples
  // The test examples of the scheduled evaluations when metrics.eval_examples = k is
  // above 0 and below the test set's size: k of them drawn uniformly without replacement
  // (datasets::SampleIndices, seeded by DeriveSeed(seed, "eval_examples")), the same k at
  // every evaluation and in every process of the run. Not the first k: a test set stored
  // in an order (MNIST's first 5,000 test images are the easier half) would bias the
  // accuracy the run reports, and the time at which it reaches a target. Empty otherwise.
  datasets::Dataset eval_subset;

  // The test set an evaluation uses: the whole one for the final evaluation (`full`) and
  // when there is no subset, else eval_subset.
  const datasets::Dataset& EvalSet(bool full) const {
    return full || eval_subset.num_examples == 0 ? data.test : eval_subset;
  }
};

// Loads the data, builds the model and validates the optimizer and strategy options, and
// partitions the training set over the workers. Throws ConfigError (more workers than
// training examples, a bad option) or DataError.
Problem LoadProblem(const Config& config, const RunRequest& request);

// Hogwild's sparse path: a sparse model (logistic regression on LIBSVM data) with plain SGD
// and no weight decay touches only the batch's coordinates.
bool UsesSparseUpdates(const Problem& problem);

// Each worker's device (model.device) and, for a worker on a GPU, its model there; a worker
// on the CPU clones the problem's model (null entry).
struct WorkerDevices {
  std::vector<models::Device> devices;
  std::vector<std::unique_ptr<models::Model>> models;
  // The model worker w computes on (its GPU model, or the problem's to clone).
  const models::Model* ModelOf(int w, const Problem& problem) const;
  std::string Describe() const;  // summary.csv's device column
};
// Throws ConfigError (a device this process cannot use).
WorkerDevices MakeWorkerDevices(const Problem& problem);

// Worker w's setup with the problem's options, data partition, batch size, seed and rate
// (WorkerLearningRate); the driver sets the clock, and may replace the model (a CUDA
// worker's), the seed (a resumed run) and set sparse and after_gradient.
WorkerSetup MakeWorkerSetup(const Problem& problem, int w);

// One evaluation's convergence.csv row and progress line: the centre's test result after
// `samples` samples and `updates` pushes, begun at training time `time_s`; train_loss is
// the mean training loss since the previous row (NaN: none).
struct EvaluationPoint {
  double time_s = 0;
  int64_t samples = 0;
  int64_t updates = 0;
  double train_loss = 0;
  double learning_rate = 0;
};
ConvergenceRow MakeConvergenceRow(const EvaluationPoint& at, const models::EvalResult& result,
                                  int64_t train_examples);
ProgressState MakeProgressState(const ConvergenceRow& row, double target_epochs);

}  // namespace asgd::experiments
