#include "experiments/run/problem.h"

#include <cmath>
#include <cstdio>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "datasets/partition.h"
#include "experiments/config/setup.h"
#include "models/factory.h"

namespace asgd::experiments {

using ::asgd::internal::StrCat;

Problem LoadProblem(const Config& config, const RunRequest& request) {
  Problem p;
  p.seed = static_cast<uint64_t>(config.Int("experiment.seed"));
  p.name = config.String("algorithm.name");
  p.strategy = &algorithms::FindStrategy(p.name);
  p.workers = static_cast<int>(config.Int("algorithm.workers"));
  p.data = datasets::LoadDataset(BuildDataOptions(config, request.data_dirs));
  p.model =
      models::NewModelOn(BuildModelOptions(config), InputSpecFor(p.data.train), models::Device{});
  p.n_params = p.model->layout().size();
  p.optimizer = BuildOptimizerOptions(config);
  (void)algorithms::NewOptimizer(p.optimizer, p.n_params);  // validates
  p.strategy_options = BuildStrategyOptions(config, p.data.train.num_examples);
  (void)p.strategy->server_rule(p.strategy_options, 0);  // validates the server options
  p.schedule = BuildScheduleOptions(config);
  p.batch_size = config.Int("algorithm.batch_size");
  const int64_t examples = p.data.train.num_examples;
  p.partitions = datasets::PartitionIndices(examples, p.workers, DeriveSeed(p.seed, "partition"));
  for (const auto& part : p.partitions) {
    if (part.empty()) {
      throw ConfigError("algorithm.workers", std::to_string(p.workers),
                        StrCat("at most ", examples, " workers (one example each)"));
    }
  }
  return p;
}

WorkerSetup MakeWorkerSetup(const Config& config, const Problem& problem, int w) {
  WorkerSetup ws;
  ws.worker = w;
  ws.num_workers = problem.workers;
  ws.strategy = problem.strategy;
  ws.options = problem.strategy_options;
  ws.optimizer = problem.optimizer;
  ws.learning_rate = WorkerLearningRate(config, w);
  ws.model = problem.model.get();
  ws.train = &problem.data.train;
  ws.examples = problem.partitions[static_cast<std::size_t>(w)];
  ws.batch_size = problem.batch_size;
  ws.augment = BuildAugmentOptions(config);
  ws.seed = problem.seed;
  return ws;
}

ConvergenceRow MakeConvergenceRow(const EvaluationPoint& at, const models::EvalResult& result,
                                  int64_t train_examples) {
  ConvergenceRow row;
  row.time_s = at.time_s;
  row.epoch = static_cast<double>(at.samples) / static_cast<double>(train_examples);
  row.samples = at.samples;
  row.updates = at.updates;
  row.train_loss = at.train_loss;
  row.test_loss = result.mean_loss();
  row.test_accuracy = result.accuracy();
  row.eval_examples = result.count;
  row.learning_rate = at.learning_rate;
  return row;
}

ProgressState MakeProgressState(const ConvergenceRow& row, double target_epochs) {
  ProgressState ps;
  ps.epoch = row.epoch;
  ps.target_epochs = target_epochs;
  ps.updates = row.updates;
  ps.train_loss = std::isnan(row.train_loss) ? 0.0 : row.train_loss;
  ps.test_accuracy = row.test_accuracy;
  ps.elapsed_s = row.time_s;
  ps.updates_per_s = row.time_s > 0 ? static_cast<double>(row.updates) / row.time_s : 0.0;
  return ps;
}

RunResult FinishRun(const Config& config, const Problem& problem, const RunDir& run,
                    const RunRecorder& recorder, const StalenessRecorder& staleness,
                    const RunEnd& end, const std::vector<WorkerMetrics>& workers,
                    const std::map<std::string, std::string>& more, std::ostream& out) {
  RunResult result;
  result.run_dir = run.path();
  result.wall_time_s = end.time_s;
  result.final_test_accuracy = recorder.final_test_accuracy();
  result.final_test_loss = recorder.final_test_loss();
  result.best_test_accuracy = recorder.best_test_accuracy();
  result.updates = end.updates;
  result.samples = end.samples;
  result.reason = end.reason;
  result.status = end.failed ? "failed" : "completed";
  result.exit_status = end.failed ? 2 : 0;
  const StalenessRecorder::Stats st = staleness.stats();

  SummaryRow summary = recorder.Summary();
  summary.run_id = run.id();
  summary.algorithm = problem.name;
  summary.model = config.String("model.name");
  summary.device = end.device;
  summary.dataset = config.String("data.dataset");
  summary.workers = problem.workers;
  summary.ps_shards = end.ps_shards;
  summary.transport = end.transport;
  const std::string compression = config.String("compression.name");
  summary.compression =
      compression + (compression != "none" && config.Bool("compression.error_feedback") ? "+ef" : "");
  summary.time_model = end.time_model;
  summary.seed = static_cast<int64_t>(problem.seed);
  const double epochs =
      static_cast<double>(end.samples) / static_cast<double>(problem.data.train.num_examples);
  summary.epochs = epochs;
  summary.samples = end.samples;
  summary.updates = end.updates;
  summary.wall_time_s = end.time_s;
  summary.staleness = st;
  for (const WorkerMetrics& w : workers) {
    summary.dropped_pushes += w.dropped_pushes;
    summary.bytes_pushed += w.bytes_pushed;
    summary.dense_bytes_pushed += w.dense_bytes_pushed;
    summary.bytes_pulled += w.bytes_pulled;
  }
  summary.status = result.status;
  RunRecorder::Finish(run, summary, workers, &staleness, end.reason, more);
  if (end.failed) {
    ASGD_LOG(kError, end.reason);
    out << "run stopped: " << end.reason << "\nrun folder: " << run.path() << "\n";
    return result;
  }
  const int64_t dropped = summary.dropped_pushes;
  char line[400];
  std::snprintf(line, sizeof(line),
                "final test accuracy: %.4f (loss %.4f) after %.2f epochs, %lld pushes, %.*f %s "
                "(%s)\nmean staleness: %.2f (max %lld) over %lld pushes%s\n",
                result.final_test_accuracy, result.final_test_loss, epochs,
                static_cast<long long>(result.updates), end.time_digits, end.time_s,
                end.time_unit.c_str(), end.reason.c_str(), st.count > 0 ? st.mean : 0.0,
                static_cast<long long>(st.max), static_cast<long long>(st.count),
                dropped > 0 ? StrCat("; ", dropped, " dropped as stale").c_str() : "");
  out << line << "run folder: " << run.path() << "\n";
  return result;
}

}  // namespace asgd::experiments
