#include "experiments/run/sim_collective_runner.h"

#include <cmath>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "algorithms/strategy.h"
#include "collective/collective.h"
#include "core/aligned.h"
#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "datasets/partition.h"
#include "experiments/config/setup.h"
#include "experiments/record/csv.h"
#include "experiments/record/metrics.h"
#include "experiments/record/progress.h"
#include "experiments/record/run_core.h"
#include "experiments/record/run_dir.h"
#include "experiments/run/collective_rank.h"
#include "experiments/run/collective_runner.h"
#include "experiments/run/evaluation.h"
#include "experiments/run/problem.h"
#include "experiments/run/worker_loop.h"
#include "sim/core_pool.h"
#include "sim/delay_model.h"
#include "sim/options.h"
#include "sim/scheduler.h"
#include "sim/sim_collective.h"

namespace asgd::experiments {
namespace {

namespace alg = ::asgd::algorithms;
namespace col = ::asgd::collective;
using ::asgd::internal::StrCat;

// What a simulated run on a collective refuses, before anything is created. Throws
// ConfigError.
void CheckSimulable(const Config& config, const RunRequest& request) {
  RefuseCurveOnCollective(config);
  if (!request.resume_dir.empty()) {
    throw ConfigError("cluster.transport", "sim",
                      "inproc or memory for --resume (simulated runs do not checkpoint)");
  }
  for (const char* key : {"experiment.checkpoint_every_steps", "experiment.checkpoint_every_s"}) {
    if (config.Double(key) > 0) {
      throw ConfigError(key, config.Raw(key),
                        "0 with cluster.transport = sim (simulated runs do not checkpoint)");
    }
  }
  if (config.String("model.device") != "cpu") {
    throw ConfigError("model.device", config.String("model.device"),
                      "cpu with cluster.transport = sim (simulated workers share one thread)");
  }
}

// LoadProblem's part for a strategy on a collective (no server rule to validate): the
// data, the model, the options and the partitions, as the thread runner makes them.
void LoadCollectiveProblem(const Config& config, const RunRequest& request, Problem& p) {
  p.seed = static_cast<uint64_t>(config.Int("experiment.seed"));
  p.name = config.String("algorithm.name");
  p.strategy = &alg::FindStrategy(p.name);
  p.workers = static_cast<int>(config.Int("algorithm.workers"));
  p.data = datasets::LoadDataset(BuildDataOptions(config, request.data_dirs));
  p.model =
      models::NewModelOn(BuildModelOptions(config), InputSpecFor(p.data.train), models::Device{});
  p.n_params = p.model->layout().size();
  p.optimizer = BuildOptimizerOptions(config);
  (void)alg::NewOptimizer(p.optimizer, p.n_params);  // validates
  p.strategy_options = BuildStrategyOptions(config, p.data.train.num_examples);
  (void)p.strategy->worker_rule(p.strategy_options);  // validates the strategy's keys
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
}

// The run's progress (one thread: plain fields).
struct Progressed {
  int64_t samples = 0, steps = 0, pushes = 0;
  double loss_sum = 0;  // since the last convergence row
  int64_t loss_count = 0;
  bool stop = false;    // the driver's wish (time limit, target): the ranks vote on it
  std::string reason;   // set when the driver stopped the run
  std::string failure;  // the first rank failure
  // The last boundary rank 0 published: the average θ̄ and its consensus distance.
  std::vector<float> average;
  double consensus = 0;
};

}  // namespace

RunResult RunSimulatedCollective(const Config& config, const RunRequest& request,
                                 std::ostream& out) {
  CheckSimulable(config, request);
  const sim::SimOptions sim_options = BuildSimOptions(config);  // validates
  const std::string time_model = "virtual: " + DescribeTimeModel(config);
  Problem problem;
  LoadCollectiveProblem(config, request, problem);
  const alg::Strategy& strategy = *problem.strategy;
  const int workers = problem.workers;
  const datasets::Dataset& train = problem.data.train;
  col::CollectiveOptions co;
  co.size = workers;
  co.algorithm = col::ParseAlgorithm(config.String("collective.algorithm"));
  co.Validate();
  const StopPolicy stop = StopPolicy::FromConfig(config, train.num_examples);
  EvalSchedule eval_schedule = EvalSchedule::FromConfig(config, train.num_examples);
  const double lr0 = config.Double("algorithm.learning_rate");
  const CollectivePlan plan = CollectivePlan::Make(config, strategy, problem.strategy_options,
                                                   problem.partitions, train.num_examples);

  RunDir run =
      RunDir::Create(WithDataStatistics(config, train), request.name, request.command_line);
  RunRecorder recorder(run, stop.target_accuracy());
  auto staleness_file = run.Open("staleness.csv");
  StalenessRecorder staleness(staleness_file.get(), config.Int("metrics.staleness_rows"), 0.0, -1,
                              /*buffered=*/true);

  AlignedVector<float> initial(static_cast<std::size_t>(problem.n_params));
  problem.model->Initialize(initial, DeriveSeed(problem.seed, "init"));

  sim::Scheduler sched(sim_options.scheduler);
  sim::DelayModel delay(sim_options.delay, workers, DeriveSeed(problem.seed, "delay"));
  sim::CorePool cores(sim_options.cores);
  // The strategy's traffic, and the votes and averages at the boundaries (not counted).
  sim::SimCollectiveGroup payload(&sched, sim_options.network, workers, co.algorithm);
  sim::SimCollectiveGroup control(&sched, sim_options.network, workers, co.algorithm);
  sim::VirtualClock clock(sched);
  TrainingClock training(&clock);
  training.Start();
  auto seconds = [&] { return training.Seconds(); };

  ASGD_LOG(kInfo, "run ", run.id(), ": ", problem.name, " with ", workers,
           " simulated workers on a simulated collective (", col::AlgorithmName(co.algorithm), "; ",
           time_model, "), ", problem.model->Describe(), ", ", train.name, " (", train.num_examples,
           " examples)");

  Progressed p;
  Progress progress(Progress::DecideLive(config.String("experiment.progress")), std::cerr);
  // Evaluates `params` (the ranks' average) after `samples` and `rounds` communication
  // rounds, at the current virtual instant.
  auto evaluate = [&](std::span<const float> params, double consensus, int64_t samples,
                      int64_t rounds, bool full) {
    const double t = seconds();
    const models::EvalResult r = EvaluateOn(*problem.model, params, problem.data.test, train,
                                            full ? 0 : eval_schedule.ScheduledExamples());
    const double train_loss =
        p.loss_count > 0 ? p.loss_sum / static_cast<double>(p.loss_count) : std::nan("");
    p.loss_sum = 0;
    p.loss_count = 0;
    const double epoch = static_cast<double>(samples) / static_cast<double>(train.num_examples);
    ConvergenceRow row = MakeConvergenceRow(
        {t, samples, rounds, train_loss, lr0 * alg::LearningRateScale(problem.schedule, epoch)}, r,
        train.num_examples);
    row.consensus_distance = consensus;
    const double best_before = recorder.best_test_accuracy();
    SaveBestModel(*problem.model, params, r.accuracy(), best_before, run.path());
    if (recorder.Convergence(row) && stop.stop_at_target() && !p.stop) {
      p.stop = true;
      p.reason = stop.TargetReason();
    }
    progress.Evaluated(MakeProgressState(row, config.Double("experiment.epochs")), r.mean_loss());
    eval_schedule.Evaluated(samples, t, full);
    staleness.Flush();
  };
  evaluate(initial, 0.0, 0, 0, false);  // every rank starts here (the broadcast)
  eval_schedule.SetLastTime(seconds());

  // ---- ranks: one scheduler task each -------------------------------------------------
  std::vector<std::unique_ptr<WorkerLoop>> loops;
  for (int w = 0; w < workers; ++w) {
    WorkerSetup ws = MakeWorkerSetup(config, problem, w);
    ws.learning_rate = lr0;  // one rate: the replicas apply the same step (as the threads)
    ws.clock = &clock;
    ws.after_gradient = [&sched, &delay, &cores, w](Duration cpu) {
      const Duration now = sched.Now();
      sched.Sleep(cores.Run(now, delay.StepTime(w, cpu)) - now);
    };
    loops.push_back(std::make_unique<WorkerLoop>(std::move(ws)));
  }
  // Rank 0's communication rounds so far: every rank takes part in every round, so these
  // are the run's rounds (the updates column), exact at rank 0's boundaries.
  int64_t rounds = 0;
  CollectiveRankHooks hooks;
  hooks.stop_wanted = [&] {
    if (!p.stop) {
      if (auto why = stop.Check(p.samples, p.steps, seconds(), false)) {
        p.stop = true;
        p.reason = *why;
      }
    }
    return p.stop;
  };
  // By seconds only (samples 0): the ranks hold themselves at the evaluations by epochs.
  hooks.eval_wanted = [&]() -> int64_t { return eval_schedule.Due(0, seconds()) ? 1 : 0; };
  hooks.boundary = [&](const CollectiveBoundary& b) {
    if (b.rank != 0) return;
    p.average.assign(b.average.begin(), b.average.end());
    p.consensus = b.consensus;
    if (b.evaluate) evaluate(b.average, b.consensus, b.samples, rounds, false);
  };
  auto after_step = [&](int w, const alg::StepResult& r, int64_t batch, int64_t step) {
    p.samples += batch;
    p.steps += r.local_steps;
    p.pushes += r.pushes;
    if (w == 0) rounds += r.pushes;
    p.loss_sum += static_cast<double>(r.loss) * static_cast<double>(batch);
    p.loss_count += batch;
    // No update is stale: each applies a gradient to the parameters it was computed on.
    transport::StalenessRecord rec;
    rec.worker = static_cast<uint32_t>(w);
    rec.step = step;
    rec.pulled_version = static_cast<uint64_t>(step - 1);
    rec.applied_version = rec.pulled_version;
    rec.wall_time_s = seconds();
    staleness.Record(rec);
  };
  for (int w = 0; w < workers; ++w) {
    sched.Spawn(StrCat("worker ", w), [&, w] {
      CollectiveRankHooks mine = hooks;
      mine.after_step = [&, w](const alg::StepResult& r, int64_t batch, int64_t step) {
        after_step(w, r, batch, step);
      };
      const std::unique_ptr<col::Collective> pay = payload.Rank(w);
      const std::unique_ptr<col::Collective> ctl = control.Rank(w);
      const WorkerOutcome o = RunCollectiveRank(*loops[static_cast<std::size_t>(w)], plan, config,
                                                w, *pay, *ctl, initial, mine);
      if (!o.failure.empty() && p.failure.empty()) {
        p.failure = o.failure;
        p.stop = true;
      }
    });
  }
  sched.Run();
  if (sched.unfinished_tasks() > 0) {
    // Ranks waiting for a peer that failed: their collective can never complete; fail it,
    // as a real one fails at its timeout.
    payload.Shutdown();
    control.Shutdown();
    sched.Run();
  }
  ASGD_CHECK_EQ(sched.unfinished_tasks(), 0, "simulated ranks still blocked after shutdown");
  const double end_s = seconds();

  const bool failed = !p.failure.empty();
  std::string reason = failed ? p.failure : p.reason;
  if (reason.empty()) {
    reason = stop.Check(p.samples, p.steps, end_s, recorder.time_to_target_s() >= 0)
                 .value_or(stop.TargetReason());
  }
  if (!failed) {
    // The ranks published their final average when they voted to stop.
    evaluate(p.average, p.consensus, p.samples, rounds, true);
    SaveFinalModel(*problem.model, p.average, run.path());
  }
  progress.Done();
  staleness.Flush();

  std::vector<WorkerMetrics> worker_metrics;
  for (const auto& loop : loops) worker_metrics.push_back(loop->Snapshot());
  RunEnd end;
  end.time_s = end_s;
  end.samples = p.samples;
  end.updates = rounds;
  end.reason = reason;
  end.failed = failed;
  end.ps_shards = 0;
  end.transport = "sim";
  end.time_model = time_model;
  end.time_digits = 3;
  end.time_unit = "virtual s";
  const auto secs = [](Duration d) { return CsvCell(std::chrono::duration<double>(d).count()); };
  return FinishRun(config, problem, run, recorder, staleness, end, worker_metrics,
                   {{"simulated", "true"},
                    {"time_model", time_model},
                    {"sim_collective", std::string(col::AlgorithmName(co.algorithm))},
                    {"sim_collective_operations", std::to_string(payload.stats().operations)},
                    {"sim_collective_time_s", secs(payload.stats().time)},
                    {"sim_collective_wait_s", secs(payload.stats().waited)},
                    {"sim_events", std::to_string(sched.events_run())},
                    {"sim_core_wait_s", secs(cores.waited())}},
                   out);
}

}  // namespace asgd::experiments
