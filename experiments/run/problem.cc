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
  p.plan = RunPlan::FromConfig(config);
  const RunPlan& plan = p.plan;
  p.data = datasets::LoadDataset(BuildDataOptions(config, request.data_dirs));
  p.model = models::NewModelOn(plan.model, InputSpecFor(p.data.train), models::Device{});
  p.n_params = p.model->layout().size();
  p.optimizer = BuildOptimizerOptions(config);
  (void)algorithms::NewOptimizer(p.optimizer, p.n_params);  // validates
  p.strategy_options = BuildStrategyOptions(config, p.data.train.num_examples);
  // A bucket larger than the model would be one allreduce of the whole vector: when the
  // config gives the size, refuse it (the default simply makes one bucket of a small model).
  const int64_t model_kib = (p.model->layout().size_bytes() + 1023) / 1024;
  if (plan.family == algorithms::Family::kGroup && p.strategy_options.worker.overlap &&
      config.IsExplicit("collective.bucket_kib") &&
      config.Int("collective.bucket_kib") > model_kib) {
    throw ConfigError("collective.bucket_kib", config.Raw("collective.bucket_kib"),
                      StrCat("at most the model's size, ", model_kib, " KiB"));
  }
  // Validates the strategy's keys (a server rule for the parameter-server strategies).
  switch (plan.family) {
    case algorithms::Family::kGroup:
      (void)plan.strategy->worker_rule(p.strategy_options);
      break;
    case algorithms::Family::kStore:
      (void)plan.strategy->server_rule(p.strategy_options, 0);
      break;
    case algorithms::Family::kSequential:
      break;
  }
  p.schedule = plan.schedule;  // read once by the plan
  const int64_t examples = p.data.train.num_examples;
  p.partitions =
      datasets::PartitionIndices(examples, plan.workers, DeriveSeed(plan.seed, "partition"));
  for (const auto& part : p.partitions) {
    if (part.empty()) {
      throw ConfigError("algorithm.workers", std::to_string(plan.workers),
                        StrCat("at most ", examples, " workers (one example each)"));
    }
  }
  const int64_t eval_examples = config.Int("metrics.eval_examples");
  if (eval_examples > 0 && eval_examples < p.data.test.num_examples) {
    p.eval_subset = datasets::Subset(
        p.data.test, datasets::SampleIndices(p.data.test.num_examples, eval_examples,
                                             DeriveSeed(plan.seed, "eval_examples")));
  }
  return p;
}

bool UsesSparseUpdates(const Problem& problem) {
  return problem.plan.strategy->supports_sparse && problem.model->HasSparseGradient() &&
         problem.optimizer.name == "sgd" && problem.optimizer.weight_decay == 0;
}

const models::Model* WorkerDevices::ModelOf(int w, const Problem& problem) const {
  const auto& m = models[static_cast<std::size_t>(w)];
  return m ? m.get() : problem.model.get();
}

std::string WorkerDevices::Describe() const { return DescribeDevices(devices); }

WorkerDevices MakeWorkerDevices(const Problem& problem) {
  WorkerDevices d;
  const int workers = problem.plan.workers;
  for (int w = 0; w < workers; ++w) {
    d.devices.push_back(problem.plan.WorkerDevice(w));
    d.models.push_back(d.devices.back().is_cuda()
                           ? models::NewModelOn(problem.plan.model,
                                                InputSpecFor(problem.data.train), d.devices.back())
                           : nullptr);
  }
  return d;
}

WorkerSetup MakeWorkerSetup(const Problem& problem, int w) {
  WorkerSetup ws;
  ws.worker = w;
  ws.num_workers = problem.plan.workers;
  ws.strategy = problem.plan.strategy;
  ws.options = problem.strategy_options;
  ws.optimizer = problem.optimizer;
  ws.learning_rate = problem.plan.WorkerLearningRate(w);
  ws.model = problem.model.get();
  ws.train = &problem.data.train;
  ws.examples = problem.partitions[static_cast<std::size_t>(w)];
  ws.batch_size = problem.plan.batch_size;
  ws.augment = problem.plan.augment;
  ws.seed = problem.plan.seed;
  ws.compression = problem.plan.compression;
  ws.compression_seed = problem.plan.seed;
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

}  // namespace asgd::experiments
