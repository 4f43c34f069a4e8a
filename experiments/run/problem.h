// What the in-process distributed drivers (worker threads, parallel_runner.cc; a simulated
// cluster, sim_runner.cc) read and validate before they create the run folder, and the
// convergence row and progress line of one evaluation: the parts they share.
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
#include "experiments/run/runner.h"
#include "experiments/run/worker_loop.h"
#include "models/model.h"

namespace asgd::experiments {

struct Problem {
  uint64_t seed = 0;                               // experiment.seed
  std::string name;                                // algorithm.name
  const algorithms::Strategy* strategy = nullptr;  // its registry entry
  int workers = 1;                                 // algorithm.workers
  datasets::TrainTest data;
  std::unique_ptr<models::Model> model;  // the evaluator's, on the CPU
  int64_t n_params = 0;
  algorithms::OptimizerOptions optimizer;        // validated
  algorithms::StrategyOptions strategy_options;  // validated by a server rule
  algorithms::ScheduleOptions schedule;
  int64_t batch_size = 0;                        // algorithm.batch_size
  std::vector<std::vector<int64_t>> partitions;  // each worker's training examples
};

// Loads the data, builds the model and validates the optimizer and strategy options, and
// partitions the training set over the workers. Throws ConfigError (more workers than
// training examples, a bad option) or DataError.
Problem LoadProblem(const Config& config, const RunRequest& request);

// Worker w's setup with the problem's options, data partition, batch size, seed and rate
// (WorkerLearningRate); the driver sets the clock, and may replace the model (a CUDA
// worker's), the seed (a resumed run) and set sparse and after_gradient.
WorkerSetup MakeWorkerSetup(const Config& config, const Problem& problem, int w);

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

// How a finished run ended, and where it ran (summary.csv's columns that differ by driver).
struct RunEnd {
  double time_s = 0;  // training time at the end (TrainingClock)
  int64_t samples = 0, updates = 0;
  std::string reason;
  bool failed = false;
  std::string device = "cpu";
  int ps_shards = 1;
  std::string transport;
  std::string time_model = "wall";
  // How the time is printed: "%.<time_digits>f <time_unit>".
  int time_digits = 1;
  std::string time_unit = "s";
};
// The end of an in-process distributed run, after its workers stopped and its last
// evaluation: writes workers.csv, staleness_histogram.csv, summary.csv and the end of
// provenance.json (RunRecorder::Finish, with `more`), prints the run's last lines on out
// ("run stopped: ..." for a failure; else the final accuracy and the staleness), and
// returns the RunResult. Throws IoError.
RunResult FinishRun(const Config& config, const Problem& problem, const RunDir& run,
                    const RunRecorder& recorder, const StalenessRecorder& staleness,
                    const RunEnd& end, const std::vector<WorkerMetrics>& workers,
                    const std::map<std::string, std::string>& more, std::ostream& out);

}  // namespace asgd::experiments
