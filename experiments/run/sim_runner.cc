#include "experiments/run/sim_runner.h"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "algorithms/strategy.h"
#include "core/aligned.h"
#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "experiments/config/setup.h"
#include "experiments/record/csv.h"
#include "experiments/record/metrics.h"
#include "experiments/record/progress.h"
#include "experiments/record/run_core.h"
#include "experiments/record/run_dir.h"
#include "experiments/run/evaluation.h"
#include "experiments/run/problem.h"
#include "experiments/run/worker_loop.h"
#include "ps/placement.h"
#include "sim/core_pool.h"
#include "sim/delay_model.h"
#include "sim/network_model.h"
#include "sim/options.h"
#include "sim/scheduler.h"
#include "sim/sim_store.h"

namespace asgd::experiments {
namespace {

namespace alg = ::asgd::algorithms;
namespace tp = ::asgd::transport;
using ::asgd::internal::StrCat;

// What simulated runs refuse, before anything is created. Throws ConfigError.
void CheckSimulable(const Config& config, const RunRequest& request,
                    const alg::Strategy& strategy) {
  if (!strategy.can_simulate) {
    std::string names;
    for (const alg::Strategy* s : alg::Strategies()) {
      if (!s->can_simulate) continue;
      names += names.empty() ? "" : ", ";
      names += s->name;
    }
    throw ConfigError("algorithm.name", strategy.name,
                      StrCat("a strategy that can be simulated with cluster.transport = sim (",
                             names, "); ", strategy.name,
                             strategy.shared_memory ? " shares memory and sends no messages"
                                                    : " is the sequential baseline"));
  }
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

// Progress of all workers (one thread: plain fields).
struct Progressed {
  int64_t samples = 0, steps = 0, pushes = 0;
  double loss_sum = 0;  // since the last convergence row
  int64_t loss_count = 0;
  bool stop = false;
  std::string reason;   // set when a limit stopped the run
  std::string failure;  // the first worker failure
};

}  // namespace

RunResult RunSimulated(const Config& config, const RunRequest& request, std::ostream& out) {
  CheckSimulable(config, request, alg::FindStrategy(config.String("algorithm.name")));
  const sim::SimOptions sim_options = BuildSimOptions(config);  // validates
  const std::string time_model = "virtual: " + DescribeTimeModel(config);
  const Problem problem = LoadProblem(config, request);
  const alg::Strategy& strategy = *problem.strategy;
  const int workers = problem.workers;
  const int num_shards = static_cast<int>(config.Int("cluster.shards"));
  const datasets::Dataset& train = problem.data.train;
  tp::PlacementOptions po;
  po.policy = tp::ParsePlacementPolicy(config.String("cluster.placement"));
  tp::Placement placement = tp::Placement::Build(problem.model->layout(), num_shards, po);
  const StopPolicy stop = StopPolicy::FromConfig(config, train.num_examples);
  EvalSchedule eval_schedule = EvalSchedule::FromConfig(config, train.num_examples);
  const double lr0 = config.Double("algorithm.learning_rate");
  const compression::CompressionOptions compression = BuildCompressionOptions(config);
  const bool ef_residual = compression.name != "none" && compression.error_feedback;

  RunDir run =
      RunDir::Create(WithDataStatistics(config, train), request.name, request.command_line);
  RunRecorder recorder(run, stop.target_accuracy(), -1, ef_residual);
  auto staleness_file = run.Open("staleness.csv");
  // Buffered: rows reach the file at evaluations and at the end, not one flush per push.
  StalenessRecorder staleness(staleness_file.get(), config.Int("metrics.staleness_rows"), 0.0, -1,
                              /*buffered=*/true);

  AlignedVector<float> initial(static_cast<std::size_t>(problem.n_params));
  problem.model->Initialize(initial, DeriveSeed(problem.seed, "init"));

  sim::Scheduler sched(sim_options.scheduler);
  sim::NetworkModel network(sim_options.network, workers, num_shards);
  sim::DelayModel delay(sim_options.delay, workers, DeriveSeed(problem.seed, "delay"));
  sim::CorePool cores(sim_options.cores);
  sim::SimStore store(
      &sched, &network, placement, initial,
      [&](uint32_t s) { return strategy.server_rule(problem.strategy_options, s); }, &staleness);
  const Clock& clock = store.clock();
  TrainingClock training(&clock);
  training.Start();
  auto seconds = [&] { return training.Seconds(); };

  ASGD_LOG(kInfo, "run ", run.id(), ": ", problem.name, " with ", workers,
           " simulated workers and ", num_shards, " simulated shard", num_shards > 1 ? "s" : "",
           " (", time_model, "), ", problem.model->Describe(), ", ", train.name, " (",
           train.num_examples, " examples)");

  Progressed p;
  auto lr_scale_at = [&](int64_t samples) {
    return alg::LearningRateScale(
        problem.schedule, static_cast<double>(samples) / static_cast<double>(train.num_examples));
  };
  Progress progress(Progress::DecideLive(config.String("experiment.progress")), std::cerr);
  AlignedVector<float> centre(static_cast<std::size_t>(problem.n_params));
  // The workers' compressing clients (null: not compressing), for ef_residual_norm.
  std::vector<const alg::CompressingClient*> compressing_clients;
  // Evaluates the centre at the current virtual instant (no virtual time passes).
  auto evaluate = [&](bool full) {
    const double t = seconds();
    store.ReadValues(centre);
    const models::EvalResult r = EvaluateOn(*problem.model, centre, problem.data.test, train,
                                            full ? 0 : eval_schedule.ScheduledExamples());
    const double train_loss =
        p.loss_count > 0 ? p.loss_sum / static_cast<double>(p.loss_count) : std::nan("");
    p.loss_sum = 0;
    p.loss_count = 0;
    ConvergenceRow row = MakeConvergenceRow(
        {t, p.samples, p.pushes, train_loss, lr0 * lr_scale_at(p.samples)}, r, train.num_examples);
    if (ef_residual) row.ef_residual_norm = ResidualNorm(compressing_clients);
    const double best_before = recorder.best_test_accuracy();
    SaveBestModel(*problem.model, centre, r.accuracy(), best_before, run.path());
    if (recorder.Convergence(row) && stop.stop_at_target() && !p.stop) {
      p.stop = true;
      p.reason = stop.TargetReason();
    }
    progress.Evaluated(MakeProgressState(row, config.Double("experiment.epochs")), r.mean_loss());
    staleness.Flush();
  };
  evaluate(false);  // the initial parameters, at virtual time 0
  eval_schedule.SetLastTime(seconds());

  // ---- workers: one scheduler task each ---------------------------------------------
  std::vector<std::unique_ptr<WorkerLoop>> loops;
  std::vector<std::unique_ptr<alg::ParamClient>> clients;
  // One task runs at a time: the workers share the model's scratch and a gradient.
  SharedWorkerScratch shared(*problem.model);
  for (int w = 0; w < workers; ++w) {
    WorkerSetup ws = MakeWorkerSetup(config, problem, w);
    ws.clock = &clock;
    if (sim_options.share_buffers) ws.shared = &shared;
    ws.after_gradient = [&sched, &delay, &cores, w](Duration cpu) {
      const Duration now = sched.Now();
      sched.Sleep(cores.Run(now, delay.StepTime(w, cpu)) - now);
    };
    loops.push_back(std::make_unique<WorkerLoop>(std::move(ws)));
    const alg::CompressingClient* compressing = nullptr;
    clients.push_back(
        CompressPushes(std::make_unique<sim::SimParamClient>(&store, static_cast<uint32_t>(w)),
                       compression, problem.seed, w, &compressing));
    compressing_clients.push_back(compressing);
  }
  auto limit_reached = [&] {
    if (p.stop) return true;
    if (auto why = stop.Check(p.samples, p.steps, seconds(), false)) {
      p.stop = true;
      p.reason = *why;
    }
    return p.stop;
  };
  WorkerHooks hooks;
  hooks.before_step = [&](double* lr_scale) {
    if (limit_reached()) return false;
    if (!stop.WorkMayContinue(p.samples, p.steps)) return false;
    *lr_scale = lr_scale_at(p.samples);
    return true;
  };
  hooks.after_step = [&](const alg::StepResult& r, int64_t batch) {
    p.samples += batch;
    p.steps += r.local_steps;
    p.pushes += r.pushes;
    p.loss_sum += static_cast<double>(r.loss) * static_cast<double>(batch);
    p.loss_count += batch;
    if (limit_reached()) return;
    if (eval_schedule.Due(p.samples, seconds())) {
      evaluate(false);
      eval_schedule.Evaluated(p.samples, seconds(), false);
    }
  };
  // A synchronous worker's request still held when the run ends is answered with
  // kShuttingDown: the end of its last round, not a failure.
  hooks.ending = [&] { return p.stop; };
  for (int w = 0; w < workers; ++w) {
    sched.Spawn(StrCat("worker ", w), [&, w] {
      const auto i = static_cast<std::size_t>(w);
      const WorkerOutcome o = loops[i]->Run(*clients[i], hooks);
      if (!o.failure.empty() && p.failure.empty()) {
        p.failure = o.failure;
        p.stop = true;
      }
    });
  }
  sched.Run();
  if (sched.unfinished_tasks() > 0) {
    // Workers held by a synchronous rule whose peers have stopped: nothing else can
    // happen, so the run is over; release them as the other drivers do, by closing.
    p.stop = true;
    store.Shutdown();
    sched.Run();
  }
  ASGD_CHECK_EQ(sched.unfinished_tasks(), 0, "simulated workers still blocked after shutdown");
  const double end_s = seconds();

  const bool failed = !p.failure.empty();
  std::string reason = failed ? p.failure : p.reason;
  if (reason.empty()) {
    reason = stop.Check(p.samples, p.steps, end_s, false).value_or(stop.TargetReason());
  }
  if (!failed && eval_schedule.FinalNeeded(p.samples)) evaluate(true);
  if (!failed) SaveFinalModel(*problem.model, centre, run.path());
  progress.Done();
  staleness.Flush();

  std::vector<WorkerMetrics> worker_metrics;
  for (const auto& loop : loops) worker_metrics.push_back(loop->Snapshot());
  RunEnd end;
  end.time_s = end_s;
  end.samples = p.samples;
  end.updates = p.pushes;
  end.reason = reason;
  end.failed = failed;
  end.ps_shards = num_shards;
  end.transport = "sim";
  end.time_model = time_model;
  end.time_digits = 3;
  end.time_unit = "virtual s";
  return FinishRun(
      config, problem, run, recorder, staleness, end, worker_metrics,
      {{"simulated", "true"},
       {"time_model", time_model},
       {"sim_events", std::to_string(sched.events_run())},
       {"sim_core_wait_s", CsvCell(std::chrono::duration<double>(cores.waited()).count())}},
      out);
}

}  // namespace asgd::experiments
