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
#include "experiments/config/cluster_plan.h"
#include "experiments/config/config_keys.h"
#include "experiments/config/setup.h"
#include "experiments/record/csv.h"
#include "experiments/record/metrics.h"
#include "experiments/record/progress.h"
#include "experiments/record/run_core.h"
#include "experiments/record/run_dir.h"
#include "experiments/run/evaluation.h"
#include "experiments/run/problem.h"
#include "experiments/run/run_session.h"
#include "experiments/run/sim_driver.h"
#include "experiments/run/threads_driver.h"
#include "models/factory.h"

namespace asgd::experiments {
namespace {

// What the sequential baseline refuses: it does not checkpoint (its runs are the short
// references) and has one worker. Throws ConfigError.
void CheckSequential(const Config& config, const RunRequest& request) {
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
}

// The sequential baseline: plain mini-batch SGD (or the configured optimizer) on one
// thread, evaluating between steps; its evaluations are held time.
class SequentialRun {
 public:
  SequentialRun(const Problem& problem, RunSession& session, const Clock* clock,
                models::Model& trainer)
      : problem_(problem),
        session_(session),
        clock_(clock),
        trainer_(trainer),
        optimizer_(algorithms::NewOptimizer(problem.optimizer, problem.n_params)),
        sampler_(problem.data.train, datasets::AllIndices(problem.data.train.num_examples),
                 SamplerOptions(problem.plan)),
        params_(static_cast<std::size_t>(problem.n_params)),
        grad_(static_cast<std::size_t>(problem.n_params)),
        lr_(problem.plan.learning_rate) {
    problem.model->Initialize(params_, DeriveSeed(problem.plan.seed, "init"));
    // The draws of its steps (a TorchScript module's dropout): worker 0's stream, as in
    // the worker loop.
    trainer_.SeedTraining(DeriveSeed(problem.plan.seed, "dropout", 0), 0);
  }

  // Trains until a limit or a non-finite loss; the last row evaluates the whole test set.
  void Run() {
    const StopPolicy& stop = session_.stop();
    EvalSchedule& schedule = session_.eval_schedule();
    Evaluate(false);
    int64_t epochs_seen = 0;
    for (;;) {
      if (auto why = stop.Check(samples_, updates_, session_.Seconds(),
                                session_.recorder().time_to_target_s() >= 0)) {
        reason_ = *why;
        break;
      }
      datasets::BatchView batch = sampler_.Next();
      const Duration step_start = clock_->Now();
      const float loss = trainer_.LossAndGradient(params_, batch, grad_);
      if (!std::isfinite(loss)) {
        failed_ = true;
        reason_ = updates_ == 0 ? NonFiniteFirstLossReason(loss, "", trainer_.Source())
                                : stop.NonFiniteLossReason(loss, updates_ + 1);
        break;
      }
      optimizer_->Step(params_, grad_, static_cast<float>(lr_));
      compute_ += clock_->Now() - step_start;
      ++updates_;
      samples_ += batch.size;
      loss_sum_ += static_cast<double>(loss) * static_cast<double>(batch.size);
      loss_count_ += batch.size;
      if (sampler_.epochs_completed() > epochs_seen) {
        epochs_seen = sampler_.epochs_completed();
        lr_ *= problem_.plan.lr_decay;
      }
      if (schedule.Due(samples_, session_.Seconds())) {
        Evaluate(schedule.ScheduledIsFull());
      } else {
        session_.progress().Tick(Progressed());
      }
    }
    if (!failed_ && schedule.FinalNeeded(samples_)) Evaluate(true);
  }

  RunResult Finish(const std::string& device, std::ostream& out) {
    WorkerMetrics worker;
    worker.steps = updates_;
    worker.samples = samples_;
    worker.active_s = session_.Seconds();
    worker.compute_s = std::chrono::duration<double>(compute_).count();
    RunEnd end;
    end.time_s = session_.Seconds();
    end.samples = samples_;
    end.updates = updates_;
    end.reason = reason_;
    end.failed = failed_;
    end.device = device;
    end.updates_word = "updates";
    return session_.Finish(*problem_.model, params_, end, {worker}, {}, out);
  }

 private:
  static datasets::SamplerOptions SamplerOptions(const RunPlan& plan) {
    datasets::SamplerOptions o;
    o.batch_size = plan.batch_size;
    o.seed = DeriveSeed(plan.seed, "sampler", 0);
    o.augment = plan.augment;
    o.augment.seed = DeriveSeed(plan.seed, "augment", 0);
    return o;
  }

  double MeanLoss(double none) const {
    return loss_count_ ? loss_sum_ / static_cast<double>(loss_count_) : none;
  }

  // The progress line between evaluations.
  ProgressState Progressed() const {
    ProgressState s;
    s.epoch = static_cast<double>(samples_) / static_cast<double>(problem_.data.train.num_examples);
    s.target_epochs = problem_.plan.epochs;
    s.updates = updates_;
    s.train_loss = MeanLoss(0.0);
    s.test_accuracy = -1;
    s.elapsed_s = session_.Seconds();
    s.updates_per_s = s.elapsed_s > 0 ? static_cast<double>(updates_) / s.elapsed_s : 0.0;
    return s;
  }

  // Evaluates the parameters and writes a convergence row.
  void Evaluate(bool full) {
    TrainingClock& training = session_.training();
    training.Hold();
    const double t = session_.Seconds();
    EvalInput in;
    in.samples = samples_;
    in.updates = updates_;
    in.train_loss = MeanLoss(std::nan(""));
    in.learning_rate = lr_;
    session_.Evaluate(*problem_.model, params_, in, t, full);
    loss_sum_ = 0;
    loss_count_ = 0;
    session_.eval_schedule().Evaluated(samples_, t, full);
    training.Release();
  }

  const Problem& problem_;
  RunSession& session_;
  const Clock* clock_;
  models::Model& trainer_;
  std::unique_ptr<algorithms::Optimizer> optimizer_;
  datasets::BatchSampler sampler_;
  AlignedVector<float> params_;
  AlignedVector<float> grad_;
  double lr_;
  int64_t updates_ = 0;
  int64_t samples_ = 0;
  Duration compute_{0};  // gradient and optimizer steps
  double loss_sum_ = 0;  // since the last row
  int64_t loss_count_ = 0;
  std::string reason_;
  bool failed_ = false;
};

RunResult RunSequential(const Config& config, const RunRequest& request, std::ostream& out) {
  CheckSequential(config, request);
  // Everything that can fail on bad input fails here, before the run folder exists.
  const Problem problem = LoadProblem(config, request);
  // The gradient's model on model.device (the evaluation stays on the CPU model).
  const models::Device device = problem.plan.WorkerDevice(0);
  std::unique_ptr<models::Model> device_model;
  if (device.is_cuda()) {
    device_model = models::NewModelOn(problem.plan.model, InputSpecFor(problem.data.train), device);
  }
  models::Model& trainer = device_model ? *device_model : *problem.model;
  auto clock = NewSystemClock();
  SessionOptions options;
  options.clock = clock.get();
  options.staleness = false;  // one worker: nothing is stale
  RunSession session(config, request, problem, options);
  ASGD_LOG(kInfo, "run ", session.run().id(), ": ", trainer.Describe(), ", ",
           problem.data.train.name, " (", problem.data.train.num_examples, " examples), ",
           problem.data.test.name, " (", problem.data.test.num_examples, ")");
  SequentialRun run(problem, session, clock.get(), trainer);
  // time_s is training time (TrainingClock's rule): from here, evaluations taken out.
  session.training().Start();
  run.Run();
  return run.Finish(device.ToString(), out);
}

}  // namespace

RunResult RunExperiment(const Config& config, const RunRequest& request, std::ostream& out) {
  LogLevel level = LogLevel::kInfo;
  ParseLogLevel(config.String("experiment.log_level"), &level);
  SetLogLevel(level);

  (void)BuildCompressionOptions(config);  // refuses what cannot be compressed (sgd)
  const algorithms::Strategy& strategy = algorithms::FindStrategy(config.String("algorithm.name"));
  // The executor only: each is written once for both families (family_session.h). The
  // simulator refuses the sequential baseline (Strategy::can_simulate) with its reason.
  if (ClusterPlan::FromConfig(config).transport == "sim") {
    return RunInSimulator(config, request, out);
  }
  if (strategy.family == algorithms::Family::kSequential) {
    return RunSequential(config, request, out);
  }
  return RunOnThreads(config, request, out);
}

}  // namespace asgd::experiments
