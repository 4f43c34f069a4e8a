#include "experiments/run/sim_runner.h"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "algorithms/exchange.h"
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
#include "experiments/run/param_stores.h"
#include "experiments/run/problem.h"
#include "experiments/run/run_session.h"
#include "experiments/run/sim_workers.h"
#include "experiments/run/worker_loop.h"
#include "ps/placement.h"
#include "sim/core_pool.h"
#include "sim/delay_model.h"
#include "sim/network_model.h"
#include "sim/options.h"
#include "sim/scheduler.h"
#include "sim/sim_store.h"

namespace asgd::experiments {

void RefuseWhatNoSimulationDoes(const Config& config, const RunRequest& request) {
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

namespace {

namespace alg = ::asgd::algorithms;
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
  RefuseWhatNoSimulationDoes(config, request);
}

// A simulated run of the store family: the workers are tasks of one scheduler
// (SimWorkers), each over its store exchange; the run session is told of every step as
// it happens in virtual time.
class SimRun {
 public:
  SimRun(const Problem& problem, RunSession& session, sim::Scheduler& sched, ps::ParamStore& store,
         sim::CorePool& cores)
      : problem_(problem),
        session_(session),
        workers_(problem, sched, cores),
        centre_(static_cast<std::size_t>(problem.n_params)) {
    for (int w = 0; w < problem.plan.workers; ++w) {
      clients_.push_back(store.NewClient(static_cast<uint32_t>(w), ps::Role::kWorker));
      exchanges_.push_back(alg::NewStoreExchange(clients_.back().get()));
    }
  }

  // Evaluates the centre at the current virtual instant (no virtual time passes).
  void Evaluate(ps::ParamStore& store, bool full) {
    (void)store.Read(centre_);
    const double t = session_.Seconds();
    EvalInput in = session_.CountersAt(session_.counters().samples.load());
    if (problem_.plan.ef_residual) in.ef_residual_norm = ResidualNorm(workers_.loops());
    if (session_.Evaluate(*problem_.model, centre_, in, t, full) &&
        session_.stop().stop_at_target() && !stopped_) {
      stopped_ = true;
      reason_ = session_.stop().TargetReason();
    }
    session_.staleness()->Flush();
  }

  // Runs the workers to the end of the run. Returns the reason it stopped.
  std::string Run(const Config& config, ps::ParamStore& store) {
    RunCounters& c = session_.counters();
    // One task runs at a time: the workers share the model's scratch and a gradient.
    shared_ = std::make_unique<SharedWorkerScratch>(*problem_.model);
    for (int w = 0; w < problem_.plan.workers; ++w) {
      WorkerSetup ws = MakeWorkerSetup(config, problem_, w);
      if (problem_.plan.sim.share_buffers) ws.shared = shared_.get();
      workers_.Add(std::move(ws));
    }
    EvalSchedule& schedule = session_.eval_schedule();
    schedule.SetLastTime(session_.Seconds());
    WorkerHooks hooks;
    hooks.before_step = [&](double* lr_scale) {
      if (LimitReached()) return false;
      if (!session_.stop().WorkMayContinue(c.samples.load(), c.steps.load())) return false;
      *lr_scale = session_.LearningRateScaleAt(c.samples.load());
      return true;
    };
    hooks.after_step = [&](const alg::StepResult& r, int64_t batch) {
      c.AddStep(batch, r.local_steps, r.pushes, r.loss);
      if (LimitReached()) return;
      if (schedule.Due(c.samples.load(), session_.Seconds())) {
        Evaluate(store, false);
        schedule.Evaluated(c.samples.load(), session_.Seconds(), false);
      }
    };
    // A synchronous worker's request still held when the run ends is answered with
    // kShuttingDown: the end of its last round, not a failure.
    hooks.ending = [&] { return stopped_; };
    workers_.Spawn(
        [&](int w, WorkerLoop& loop) {
          return loop.Run(*exchanges_[static_cast<std::size_t>(w)], hooks);
        },
        [this] { stopped_ = true; });
    // Workers held by a synchronous rule whose peers have stopped: nothing else can
    // happen, so the run is over; release them as the other drivers do, by closing.
    workers_.Run([&] {
      stopped_ = true;
      store.Close();
    });
    if (!workers_.failure().empty()) return workers_.failure();
    if (!reason_.empty()) return reason_;
    return session_.stop()
        .Check(c.samples.load(), c.steps.load(), session_.Seconds(), false)
        .value_or(session_.stop().TargetReason());
  }

  bool failed() const { return !workers_.failure().empty(); }
  const sim::CorePool& cores() const { return workers_.cores(); }
  std::span<const float> centre() const { return centre_; }
  std::vector<WorkerMetrics> Metrics() const { return workers_.Metrics(); }

 private:
  bool LimitReached() {
    if (stopped_) return true;
    const RunCounters& c = session_.counters();
    if (auto why =
            session_.stop().Check(c.samples.load(), c.steps.load(), session_.Seconds(), false)) {
      stopped_ = true;
      reason_ = *why;
    }
    return stopped_;
  }

  const Problem& problem_;
  RunSession& session_;
  SimWorkers workers_;  // on the cores of the gradients and the transport's CPU
  std::unique_ptr<SharedWorkerScratch> shared_;  // made in Run, before the loops
  AlignedVector<float> centre_;
  std::vector<std::unique_ptr<ps::ParamClient>> clients_;  // the store's, one per worker
  std::vector<std::unique_ptr<alg::Exchange>> exchanges_;  // over clients_, one per worker
  bool stopped_ = false;
  std::string reason_;  // set when a limit or the target stopped the run
};

}  // namespace

RunResult RunSimulated(const Config& config, const RunRequest& request, std::ostream& out) {
  CheckSimulable(config, request, alg::FindStrategy(config.String("algorithm.name")));
  const std::string time_model = "virtual: " + DescribeTimeModel(config);
  const Problem problem = LoadProblem(config, request);
  const RunPlan& plan = problem.plan;
  sim::Scheduler sched(plan.sim.scheduler);
  sim::NetworkModel network(plan.sim.network, plan.workers, plan.shards, plan.seed);
  const sim::VirtualClock clock(sched);
  SessionOptions options;
  options.clock = &clock;
  RunSession session(config, request, problem, options);

  AlignedVector<float> initial(static_cast<std::size_t>(problem.n_params));
  problem.model->Initialize(initial, DeriveSeed(plan.seed, "init"));
  StoreParts parts;
  parts.initial = initial;
  parts.staleness = session.staleness();
  parts.scheduler = &sched;
  parts.network = &network;
  std::unique_ptr<ps::ParamStore> store = NewParamStore(problem, parts);
  // The host's cores: the workers' steps and, with a transport charge, every message's CPU
  // at both ends (sim/sim_store.h).
  sim::CorePool cores(plan.sim.cores);
  auto* sim_store = dynamic_cast<sim::SimStore*>(store.get());
  ASGD_CHECK(sim_store != nullptr, "a simulated run's store is a SimStore");
  sim_store->ChargeTransportCpu(&cores, plan.sim.transport_cpu);
  session.training().Start();
  ASGD_LOG(kInfo, "run ", session.run().id(), ": ", plan.name, " with ", plan.workers,
           " simulated workers and ", store->Describe(), " (", time_model, "), ",
           problem.model->Describe(), ", ", problem.data.train.name, " (",
           problem.data.train.num_examples, " examples)");

  SimRun run(problem, session, sched, *store, cores);
  run.Evaluate(*store, false);  // the initial parameters, at virtual time 0
  const std::string reason = run.Run(config, *store);
  const double end_s = session.Seconds();
  const bool failed = run.failed();
  const int64_t samples = session.counters().samples.load();
  if (!failed && session.eval_schedule().FinalNeeded(samples)) run.Evaluate(*store, true);

  RunEnd end;
  end.time_s = end_s;
  end.samples = samples;
  end.updates = session.counters().pushes.load();
  end.reason = reason;
  end.failed = failed;
  end.ps_shards = store->ps_shards();
  end.transport = store->transport();
  end.time_model = time_model;
  end.time_digits = 3;
  end.time_unit = "virtual s";
  return session.Finish(
      *problem.model, run.centre(), end, run.Metrics(),
      {{"simulated", "true"},
       {"time_model", time_model},
       {"sim_events", std::to_string(sched.events_run())},
       {"sim_core_wait_s", CsvCell(std::chrono::duration<double>(run.cores().waited()).count())}},
      out);
}

}  // namespace asgd::experiments
