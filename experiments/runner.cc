#include "experiments/runner.h"

#include <cmath>
#include <iostream>
#include <sstream>

#include "algorithms/optimizer.h"
#include "algorithms/strategy.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "datasets/loader.h"
#include "datasets/partition.h"
#include "datasets/sampler.h"
#include "experiments/config_keys.h"
#include "experiments/csv.h"
#include "experiments/evaluation.h"
#include "experiments/metrics.h"
#include "experiments/parallel_runner.h"
#include "experiments/progress.h"
#include "experiments/run_dir.h"
#include "experiments/setup.h"
#include "models/factory.h"

namespace asgd::experiments {
namespace {

// The columns of convergence.csv; results/README.md documents them and a test checks
// that the two agree.
const std::vector<std::string> kConvergenceColumns = {
    "time_s",    "epoch",     "samples",       "updates",       "train_loss",
    "test_loss", "test_accuracy", "eval_examples", "learning_rate"};

struct StopRule {
  double total_samples = 0;  // epochs × training examples
  int64_t max_steps = 0;
  double max_time_s = 0;
  double target_accuracy = 0;
  bool stop_at_target = false;
};

std::string Fixed(double v, int digits) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(digits);
  os << v;
  return os.str();
}

}  // namespace

RunResult RunExperiment(const Config& config, const RunRequest& request, std::ostream& out) {
  LogLevel level = LogLevel::kInfo;
  ParseLogLevel(config.String("experiment.log_level"), &level);
  SetLogLevel(level);

  const auto seed = static_cast<uint64_t>(config.Int("experiment.seed"));
  if (config.String("algorithm.name") == kPsCheck) {
    throw ConfigError("algorithm.name", kPsCheck,
                      "a training strategy for `asgd run`; ps_check runs as processes: "
                      "`asgd ps` and `asgd worker`");
  }
  if (!algorithms::FindStrategy(config.String("algorithm.name")).sequential) {
    return RunParallel(config, request, out);
  }
  // The sequential baseline does not checkpoint (its runs are the short references).
  for (const char* key : {"experiment.checkpoint_every_steps", "experiment.checkpoint_every_s"}) {
    if (config.Double(key) > 0) {
      throw ConfigError(key, config.Raw(key),
                        "0 for algorithm.name = sgd (the sequential baseline does not checkpoint; "
                        "distributed strategies do)");
    }
  }
  if (!request.resume_dir.empty()) {
    throw ConfigError("--resume", request.resume_dir,
                      "a run of a distributed strategy (sgd runs do not checkpoint)");
  }
  if (config.Int("algorithm.workers") != 1) {
    throw ConfigError("algorithm.workers", config.Raw("algorithm.workers"),
                      "1 for algorithm.name = sgd (the sequential baseline)");
  }

  // Everything that can fail on bad input fails here, before the run folder exists.
  datasets::TrainTest data = datasets::LoadDataset(BuildDataOptions(config, request.data_dirs));
  const datasets::Dataset& train = data.train;
  const datasets::Dataset& test = data.test;
  std::unique_ptr<models::Model> model =
      models::NewModel(BuildModelOptions(config), InputSpecFor(train));
  // The gradient's model on model.device (the evaluation stays on the CPU model).
  const models::Device device = WorkerDevice(config, 0, 1);
  std::unique_ptr<models::Model> device_model;
  if (device.is_cuda()) {
    device_model = models::NewModelOn(BuildModelOptions(config), InputSpecFor(train), device);
  }
  models::Model& trainer = device_model ? *device_model : *model;
  const int64_t n_params = model->layout().size();
  std::unique_ptr<algorithms::Optimizer> optimizer =
      algorithms::NewOptimizer(BuildOptimizerOptions(config), n_params);
  datasets::SamplerOptions sampler_options;
  sampler_options.batch_size = config.Int("algorithm.batch_size");
  sampler_options.seed = DeriveSeed(seed, "sampler", 0);
  datasets::BatchSampler sampler(train, datasets::AllIndices(train.num_examples), sampler_options);

  StopRule stop;
  stop.total_samples = config.Double("experiment.epochs") * static_cast<double>(train.num_examples);
  stop.max_steps = config.Int("experiment.max_steps");
  stop.max_time_s = config.Double("experiment.max_time_s");
  stop.target_accuracy = config.Double("experiment.target_accuracy");
  stop.stop_at_target = config.Bool("experiment.stop_at_target");
  if (stop.stop_at_target && stop.target_accuracy <= 0) {
    throw ConfigError("experiment.stop_at_target", "true",
                      "experiment.target_accuracy > 0 when stop_at_target is true");
  }
  const double eval_every_samples =
      config.Double("metrics.eval_every_epochs") * static_cast<double>(train.num_examples);
  const double eval_every_s = config.Double("metrics.eval_every_s");
  const int64_t eval_examples = config.Int("metrics.eval_examples");

  RunDir run = RunDir::Create(config, request.name, request.command_line);
  ASGD_LOG(kInfo, "run ", run.id(), ": ", trainer.Describe(), ", ", train.name, " (",
           train.num_examples, " examples), ", test.name, " (", test.num_examples, ")");
  auto convergence_file = run.Open("convergence.csv");
  CsvWriter convergence(*convergence_file, kConvergenceColumns);

  AlignedVector<float> params(static_cast<std::size_t>(n_params));
  AlignedVector<float> grad(static_cast<std::size_t>(n_params));
  model->Initialize(params, DeriveSeed(seed, "init"));

  Progress progress(Progress::DecideLive(config.String("experiment.progress")), std::cerr);
  auto clock = NewSystemClock();
  // time_s counts training only: the sequential baseline evaluates inline, and the time
  // spent evaluating is excluded so that it does not count against the algorithm.
  Duration eval_time{0};
  auto train_seconds = [&] {
    return std::chrono::duration<double>(clock->Now() - eval_time).count();
  };

  RunResult result;
  result.run_dir = run.path();
  double lr = config.Double("algorithm.learning_rate");
  const double lr_decay = config.Double("algorithm.lr_decay");
  int64_t updates = 0;
  int64_t samples = 0;
  Duration compute{0};  // gradient and optimizer steps
  double loss_sum = 0;
  int64_t loss_count = 0;
  double next_eval_samples = eval_every_samples;
  double last_eval_s = 0;
  double time_to_target = -1;
  std::string reason;
  bool failed = false;

  auto progress_state = [&](double accuracy) {
    ProgressState s;
    s.epoch = static_cast<double>(samples) / static_cast<double>(train.num_examples);
    s.target_epochs = config.Double("experiment.epochs");
    s.updates = updates;
    s.train_loss = loss_count ? loss_sum / static_cast<double>(loss_count) : 0.0;
    s.test_accuracy = accuracy;
    s.elapsed_s = train_seconds();
    s.updates_per_s = s.elapsed_s > 0 ? static_cast<double>(updates) / s.elapsed_s : 0.0;
    return s;
  };

  // Evaluates, writes a convergence row and returns the test accuracy.
  auto evaluate = [&](bool full) {
    const double t = train_seconds();
    const Duration eval_start = clock->Now();
    models::EvalResult r = EvaluateOn(*model, params, test, full ? 0 : eval_examples);
    eval_time += clock->Now() - eval_start;
    const double train_loss = loss_count ? loss_sum / static_cast<double>(loss_count)
                                         : std::nan("");
    convergence.Write(t, static_cast<double>(samples) / static_cast<double>(train.num_examples),
                      samples, updates, train_loss, r.mean_loss(), r.accuracy(), r.count, lr);
    progress.Evaluated(progress_state(r.accuracy()), r.mean_loss());
    loss_sum = 0;
    loss_count = 0;
    last_eval_s = t;
    result.best_test_accuracy = std::max(result.best_test_accuracy, r.accuracy());
    if (stop.target_accuracy > 0 && time_to_target < 0 && r.accuracy() >= stop.target_accuracy) {
      time_to_target = t;
    }
    result.final_test_accuracy = r.accuracy();
    result.final_test_loss = r.mean_loss();
    return r.accuracy();
  };

  evaluate(false);
  int64_t epochs_seen = 0;
  bool last_row_is_current = true;
  for (;;) {
    if (static_cast<double>(samples) >= stop.total_samples) {
      reason = "reached " + config.Raw("experiment.epochs") + " epochs";
      break;
    }
    if (stop.max_steps > 0 && updates >= stop.max_steps) {
      reason = "reached max_steps " + std::to_string(stop.max_steps);
      break;
    }
    if (stop.max_time_s > 0 && train_seconds() >= stop.max_time_s) {
      reason = "reached max_time_s " + config.Raw("experiment.max_time_s");
      break;
    }
    if (stop.stop_at_target && time_to_target >= 0) {
      reason = "reached target accuracy " + config.Raw("experiment.target_accuracy");
      break;
    }
    datasets::BatchView batch = sampler.Next();
    const Duration step_start = clock->Now();
    const float loss = trainer.LossAndGradient(params, batch, grad);
    if (!std::isfinite(loss)) {
      failed = true;
      reason = "training loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") +
               " at update " + std::to_string(updates + 1) +
               "; lower algorithm.learning_rate (now " + config.Raw("algorithm.learning_rate") +
               ")";
      break;
    }
    optimizer->Step(params, grad, static_cast<float>(lr));
    compute += clock->Now() - step_start;
    ++updates;
    samples += batch.size;
    loss_sum += static_cast<double>(loss) * static_cast<double>(batch.size);
    loss_count += batch.size;
    last_row_is_current = false;
    if (sampler.epochs_completed() > epochs_seen) {
      epochs_seen = sampler.epochs_completed();
      lr *= lr_decay;
    }
    if (static_cast<double>(samples) >= next_eval_samples ||
        (eval_every_s > 0 && train_seconds() - last_eval_s >= eval_every_s)) {
      while (next_eval_samples <= static_cast<double>(samples)) next_eval_samples += eval_every_samples;
      evaluate(eval_examples <= 0);
      last_row_is_current = eval_examples <= 0;
    } else {
      progress.Tick(progress_state(-1));
    }
  }
  // The last row always evaluates the whole test set at the final parameters.
  if (!failed && !last_row_is_current) evaluate(true);
  progress.Done();

  result.wall_time_s = train_seconds();
  result.updates = updates;
  result.samples = samples;
  result.reason = reason;
  result.status = failed ? "failed" : "completed";
  result.exit_status = failed ? 2 : 0;
  std::map<std::string, std::string> extra = {
      {"final_test_accuracy", CsvCell(result.final_test_accuracy)},
      {"updates", std::to_string(updates)},
      {"wall_time_s", CsvCell(result.wall_time_s)}};
  if (time_to_target >= 0) extra["time_to_target_s"] = CsvCell(time_to_target);

  WorkerMetrics worker;
  worker.steps = updates;
  worker.samples = samples;
  worker.active_s = result.wall_time_s;
  worker.compute_s = std::chrono::duration<double>(compute).count();
  WriteWorkers(*run.Open("workers.csv"), {worker});
  SummaryRow summary;
  summary.run_id = run.id();
  summary.algorithm = "sgd";
  summary.model = config.String("model.name");
  summary.device = device.ToString();
  summary.dataset = config.String("data.dataset");
  summary.seed = static_cast<int64_t>(seed);
  summary.epochs = static_cast<double>(samples) / static_cast<double>(train.num_examples);
  summary.samples = samples;
  summary.updates = updates;
  summary.wall_time_s = result.wall_time_s;
  summary.final_test_accuracy = result.final_test_accuracy;
  summary.best_test_accuracy = result.best_test_accuracy;
  summary.target_accuracy = stop.target_accuracy;
  summary.time_to_target_s = time_to_target;
  summary.status = result.status;
  WriteSummary(*run.Open("summary.csv"), summary);
  run.Finish(result.status, reason, extra);

  if (failed) {
    ASGD_LOG(kError, reason);
    out << "run stopped: " << reason << "\nrun folder: " << run.path() << "\n";
    return result;
  }
  out << "final test accuracy: " << Fixed(result.final_test_accuracy, 4) << " (loss "
      << Fixed(result.final_test_loss, 4) << ") after "
      << Fixed(static_cast<double>(samples) / static_cast<double>(train.num_examples), 2)
      << " epochs, " << updates << " updates, " << Fixed(result.wall_time_s, 1) << " s ("
      << reason << ")\n"
      << "run folder: " << run.path() << "\n";
  return result;
}

}  // namespace asgd::experiments
