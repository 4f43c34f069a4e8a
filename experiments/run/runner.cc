#include "experiments/run/runner.h"

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
#include "experiments/config/config_keys.h"
#include "experiments/config/setup.h"
#include "experiments/record/csv.h"
#include "experiments/record/metrics.h"
#include "experiments/record/progress.h"
#include "experiments/record/run_core.h"
#include "experiments/record/run_dir.h"
#include "experiments/run/collective_runner.h"
#include "experiments/run/evaluation.h"
#include "experiments/run/parallel_runner.h"
#include "experiments/run/sim_collective_runner.h"
#include "experiments/run/sim_runner.h"
#include "models/factory.h"

namespace asgd::experiments {
namespace {

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
  (void)BuildCompressionOptions(config);  // refuses what cannot be compressed (sgd)
  // A simulated run: on a simulated collective for the strategies on a collective; else
  // on the simulated store, which refuses the strategies it cannot simulate.
  if (config.String("cluster.transport") == "sim") {
    if (algorithms::FindStrategy(config.String("algorithm.name")).collective) {
      return RunSimulatedCollective(config, request, out);
    }
    return RunSimulated(config, request, out);
  }
  if (algorithms::FindStrategy(config.String("algorithm.name")).collective) {
    return RunCollective(config, request, out);
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
      models::NewModelOn(BuildModelOptions(config), InputSpecFor(train), models::Device{});
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
  sampler_options.augment = BuildAugmentOptions(config);
  sampler_options.augment.seed = DeriveSeed(seed, "augment", 0);
  datasets::BatchSampler sampler(train, datasets::AllIndices(train.num_examples), sampler_options);

  const StopPolicy stop = StopPolicy::FromConfig(config, train.num_examples);
  EvalSchedule schedule = EvalSchedule::FromConfig(config, train.num_examples);

  RunDir run =
      RunDir::Create(WithDataStatistics(config, train), request.name, request.command_line);
  ASGD_LOG(kInfo, "run ", run.id(), ": ", trainer.Describe(), ", ", train.name, " (",
           train.num_examples, " examples), ", test.name, " (", test.num_examples, ")");
  RunRecorder recorder(run, stop.target_accuracy());

  AlignedVector<float> params(static_cast<std::size_t>(n_params));
  AlignedVector<float> grad(static_cast<std::size_t>(n_params));
  model->Initialize(params, DeriveSeed(seed, "init"));

  Progress progress(Progress::DecideLive(config.String("experiment.progress")), std::cerr);
  auto clock = NewSystemClock();
  // time_s is training time (TrainingClock's rule): the baseline evaluates between steps,
  // and its evaluations are held time.
  TrainingClock training(clock.get());
  training.Start();
  auto train_seconds = [&] { return training.Seconds(); };

  RunResult result;
  result.run_dir = run.path();
  double lr = config.Double("algorithm.learning_rate");
  const double lr_decay = config.Double("algorithm.lr_decay");
  int64_t updates = 0;
  int64_t samples = 0;
  Duration compute{0};  // gradient and optimizer steps
  double loss_sum = 0;
  int64_t loss_count = 0;
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
    training.Hold();
    const double t = train_seconds();
    models::EvalResult r =
        EvaluateOn(*model, params, test, train, full ? 0 : schedule.ScheduledExamples());
    ConvergenceRow row;
    row.time_s = t;
    row.epoch = static_cast<double>(samples) / static_cast<double>(train.num_examples);
    row.samples = samples;
    row.updates = updates;
    row.train_loss = loss_count ? loss_sum / static_cast<double>(loss_count) : std::nan("");
    row.test_loss = r.mean_loss();
    row.test_accuracy = r.accuracy();
    row.eval_examples = r.count;
    row.learning_rate = lr;
    const double best_before = recorder.best_test_accuracy();
    recorder.Convergence(row);
    SaveBestModel(*model, params, r.accuracy(), best_before, run.path());
    progress.Evaluated(progress_state(r.accuracy()), r.mean_loss());
    loss_sum = 0;
    loss_count = 0;
    schedule.Evaluated(samples, t, full);
    training.Release();
    return r.accuracy();
  };

  evaluate(false);
  int64_t epochs_seen = 0;
  for (;;) {
    if (auto why =
            stop.Check(samples, updates, train_seconds(), recorder.time_to_target_s() >= 0)) {
      reason = *why;
      break;
    }
    datasets::BatchView batch = sampler.Next();
    const Duration step_start = clock->Now();
    const float loss = trainer.LossAndGradient(params, batch, grad);
    if (!std::isfinite(loss)) {
      failed = true;
      reason = stop.NonFiniteLossReason(loss, updates + 1);
      break;
    }
    optimizer->Step(params, grad, static_cast<float>(lr));
    compute += clock->Now() - step_start;
    ++updates;
    samples += batch.size;
    loss_sum += static_cast<double>(loss) * static_cast<double>(batch.size);
    loss_count += batch.size;
    if (sampler.epochs_completed() > epochs_seen) {
      epochs_seen = sampler.epochs_completed();
      lr *= lr_decay;
    }
    if (schedule.Due(samples, train_seconds())) {
      evaluate(schedule.ScheduledIsFull());
    } else {
      progress.Tick(progress_state(-1));
    }
  }
  // The last row always evaluates the whole test set at the final parameters.
  if (!failed && schedule.FinalNeeded(samples)) evaluate(true);
  if (!failed) SaveFinalModel(*model, params, run.path());
  progress.Done();

  result.wall_time_s = train_seconds();
  result.final_test_accuracy = recorder.final_test_accuracy();
  result.final_test_loss = recorder.final_test_loss();
  result.best_test_accuracy = recorder.best_test_accuracy();
  result.updates = updates;
  result.samples = samples;
  result.reason = reason;
  result.status = failed ? "failed" : "completed";
  result.exit_status = failed ? 2 : 0;
  WorkerMetrics worker;
  worker.steps = updates;
  worker.samples = samples;
  worker.active_s = result.wall_time_s;
  worker.compute_s = std::chrono::duration<double>(compute).count();
  SummaryRow summary = recorder.Summary();
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
  summary.status = result.status;
  RunRecorder::Finish(run, summary, {worker}, nullptr, reason);

  if (failed) {
    ASGD_LOG(kError, reason);
    out << "run stopped: " << reason << "\nrun folder: " << run.path() << "\n";
    return result;
  }
  out << "final test accuracy: " << Fixed(result.final_test_accuracy, 4) << " (loss "
      << Fixed(result.final_test_loss, 4) << ") after "
      << Fixed(static_cast<double>(samples) / static_cast<double>(train.num_examples), 2)
      << " epochs, " << updates << " updates, " << Fixed(result.wall_time_s, 1) << " s (" << reason
      << ")\n"
      << "run folder: " << run.path() << "\n";
  return result;
}

}  // namespace asgd::experiments
