#include "experiments/run/parallel_runner.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <ostream>
#include <thread>
#include <vector>

#include "algorithms/exchange.h"
#include "algorithms/strategy.h"
#include "core/aligned.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/rng.h"
#include "experiments/record/checkpoint.h"
#include "experiments/run/param_stores.h"
#include "experiments/run/problem.h"
#include "experiments/run/run_session.h"
#include "experiments/run/thread_workers.h"
#include "experiments/run/worker_loop.h"
#include "ps/param_store.h"
#include "sim/delay_model.h"

namespace asgd::experiments {
namespace {

namespace alg = ::asgd::algorithms;

// One run of worker threads (ThreadWorkers) of the store family, each over its store
// exchange, the main thread evaluating and checkpointing: what the thread runner adds to
// the run session.
class ThreadRun {
 public:
  ThreadRun(const Config& config, const Problem& problem, RunSession& session,
            ps::ParamStore& store, Clock* clock, const WorkerDevices& devices)
      : problem_(problem),
        session_(session),
        store_(store),
        clock_(clock),
        centre_(static_cast<std::size_t>(problem.n_params)),
        workers_(problem, clock) {
    for (int w = 0; w < problem.plan.workers; ++w) {
      WorkerSetup ws = MakeWorkerSetup(config, problem, w);
      ws.model = devices.ModelOf(w, problem);
      ws.seed = session.WorkerSeed();
      ws.sparse = UsesSparseUpdates(problem);
      workers_.Add(std::move(ws));
      clients_.push_back(store.NewClient(static_cast<uint32_t>(w), ps::Role::kWorker));
      exchanges_.push_back(alg::NewStoreExchange(clients_.back().get()));
    }
  }

  // A convergence row of the centre. While it is read and evaluated, workers start no
  // step (a worker in a step finishes it; a synchronous one may wait in its round).
  void Evaluate(bool full) {
    hold_.store(true, std::memory_order_release);
    session_.training().Hold();
    const double t = session_.Seconds();
    const int64_t samples = session_.counters().samples.load();
    const ps::Status st = store_.Read(centre_);
    if (st.ok()) {
      EvalInput in = session_.CountersAt(samples);
      if (problem_.plan.ef_residual) in.ef_residual_norm = ResidualNorm(workers_.loops());
      if (session_.Evaluate(*problem_.model, centre_, in, t, full) &&
          session_.stop().stop_at_target()) {
        session_.counters().stop.store(true);
      }
    } else {
      session_.counters().Fail("evaluator: reading the centre: " + st.ToString());
    }
    session_.training().Release();
    hold_.store(false, std::memory_order_release);
  }

  void StartWorkers() {
    RunCounters& c = session_.counters();
    hooks_.before_step = [this, &c](double* lr_scale) {
      while (hold_.load(std::memory_order_acquire)) {
        if (c.stop.load(std::memory_order_relaxed)) return false;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      if (c.stop.load(std::memory_order_relaxed)) return false;
      const int64_t done = c.samples.load(std::memory_order_relaxed);
      if (!session_.stop().WorkMayContinue(done, c.steps.load(std::memory_order_relaxed))) {
        return false;
      }
      *lr_scale = session_.LearningRateScaleAt(done);
      return true;
    };
    hooks_.after_step = [&c](const alg::StepResult& r, int64_t batch) {
      c.AddStep(batch, r.local_steps, r.pushes, r.loss);
    };
    // After the run ended, a synchronous worker's pending request is answered with
    // kShuttingDown: that is the end of its last round, not a failure.
    hooks_.ending = [&c] { return c.stop.load(); };
    workers_.Start([this](int w, WorkerLoop& loop) {
      const WorkerOutcome o = loop.Run(*exchanges_[static_cast<std::size_t>(w)], hooks_);
      if (!o.failure.empty()) session_.counters().Fail(o.failure);
    });
  }

  // The main thread until the run ends: checkpoints, the limits, the scheduled
  // evaluations. Returns the reason a limit gave (empty: a worker's failure or the target).
  std::string Supervise() {
    RunCounters& c = session_.counters();
    session_.StartCheckpoints();
    EvalSchedule& schedule = session_.eval_schedule();
    schedule.SetLastTime(session_.Seconds());
    for (;;) {
      const int64_t pushes = c.pushes.load();
      if (problem_.plan.checkpointing() && session_.CheckpointDue(pushes)) {
        SaveCheckpoint();
        session_.CheckpointSaved(pushes);
      }
      const int64_t samples = c.samples.load();
      if (c.stop.load()) return {};
      if (auto why = session_.stop().Check(samples, c.steps.load(), session_.Seconds(), false)) {
        return *why;
      }
      if (schedule.Due(samples, session_.Seconds())) {
        Evaluate(false);
        // The schedule by seconds counts training time (the evaluation is held time).
        schedule.Evaluated(samples, session_.Seconds(), false);
        continue;
      }
      session_.staleness()->Flush();
      clock_->SleepFor(std::chrono::milliseconds(5));
    }
  }

  void Stop() {
    session_.counters().stop.store(true);
    // Synchronous strategies hold workers in rounds: the store is closed, so that a worker
    // waiting for peers that already stopped is answered (kShuttingDown).
    if (problem_.plan.strategy->synchronous) store_.Close();
    workers_.Join();
  }

  // The store's snapshots with the counters and the staleness records read while every
  // shard is held, so they describe exactly the pushes the snapshots contain (the workers'
  // own counters may run a step ahead: they are for workers.csv, not for the model).
  void SaveCheckpoint() {
    RunCounters& c = session_.counters();
    StalenessRecorder& staleness = *session_.staleness();
    CheckpointManifest m = session_.NewManifest();
    const std::vector<ps::ShardSnapshot> shards = store_.Snapshot([&] {
      SetManifestCounters(
          m, {c.pushes.load(), c.steps.load(), c.samples.load(), session_.Seconds()}, &staleness);
    });
    for (const auto& loop : workers_.loops()) m.workers.push_back(loop->Snapshot());
    if (!problem_.plan.strategy->synchronous) {
      CountPushesFromRecords(m, shards.size(), session_.resume().manifest.workers);
    }
    session_.SaveCheckpoint(std::move(m), shards);
  }

  std::vector<WorkerMetrics> Metrics() const { return workers_.Metrics(); }

  std::span<const float> centre() const { return centre_; }
  // The exchanges' chains go before the store's clients under them.
  void CloseClients() {
    exchanges_.clear();
    clients_.clear();
  }

 private:
  // The pushes the snapshots contain, from their records (one per push per shard): the
  // workers' own counters lag by a push still in flight when it was taken. A resumed run's
  // histogram holds the earlier runs' records too; those pushes are the `earlier` manifest's,
  // which SaveCheckpoint adds to the workers' metrics, so they are taken out here.
  static void CountPushesFromRecords(CheckpointManifest& m, std::size_t shards,
                                     const std::vector<WorkerMetrics>& earlier) {
    int64_t total = 0;
    const auto per_push = static_cast<int64_t>(shards);
    for (std::size_t i = 0; i < m.workers.size(); ++i) {
      WorkerMetrics& w = m.workers[i];
      int64_t records = 0;
      const auto it = m.staleness_histogram.find(static_cast<uint32_t>(w.worker));
      if (it != m.staleness_histogram.end()) {
        for (const auto& entry : it->second) records += entry.second;
      }
      const int64_t pushes = records / per_push;
      total += pushes;
      w.pushes = pushes - (i < earlier.size() ? earlier[i].pushes : 0);
    }
    m.step = total;
  }

  const Problem& problem_;
  RunSession& session_;
  ps::ParamStore& store_;
  Clock* clock_;
  AlignedVector<float> centre_;
  std::vector<std::unique_ptr<ps::ParamClient>> clients_;  // the store's, one per worker
  std::vector<std::unique_ptr<alg::Exchange>> exchanges_;  // over clients_, one per worker
  // While the main thread evaluates: workers start no step (TrainingClock's held time).
  std::atomic<bool> hold_{false};
  WorkerHooks hooks_;
  ThreadWorkers workers_;  // last: its threads end before the members they use go
};

}  // namespace

RunResult RunParallel(const Config& config, const RunRequest& request, std::ostream& out) {
  const Problem problem = LoadProblem(config, request);  // validated before the folder
  const RunPlan& plan = problem.plan;
  const WorkerDevices devices = MakeWorkerDevices(config, problem);
  auto clock = NewSystemClock();
  SessionOptions options;
  options.clock = clock.get();
  RunSession session(config, request, problem, options);

  AlignedVector<float> initial(static_cast<std::size_t>(problem.n_params));
  problem.model->Initialize(initial, DeriveSeed(plan.seed, "init"));
  // time_s is training time (TrainingClock's rule): from here, with the evaluations, during
  // which workers start no step, taken out.
  session.training().Start();
  StoreParts parts;
  parts.initial = initial;
  parts.clock = clock.get();
  parts.staleness = session.staleness();
  parts.run_id = session.run().id();
  std::unique_ptr<ps::ParamStore> store = NewParamStore(problem, parts);
  if (session.resuming()) store->Restore(session.resume().shards, session.resume().dir);
  ASGD_LOG(kInfo, "run ", session.run().id(), ": ", plan.name, " with ", plan.workers,
           " workers on ", store->Describe(), ", ", problem.model->Describe(), " (workers on ",
           devices.Describe(), "), ", problem.data.train.name, " (",
           problem.data.train.num_examples, " examples)");

  ThreadRun run(config, problem, session, *store, clock.get(), devices);
  run.Evaluate(false);  // the first row: the initial parameters, before any worker starts
  run.StartWorkers();
  std::string reason = run.Supervise();
  run.Stop();
  const double wall = session.Seconds();
  const std::string failure = session.counters().failure();
  const bool failed = !failure.empty();
  if (failed) reason = failure;
  if (reason.empty()) reason = session.stop().TargetReason();
  if (!failed) run.Evaluate(true);
  // A finished run's last checkpoint: `--resume` with more epochs extends it.
  if (!failed && plan.checkpointing()) run.SaveCheckpoint();
  run.CloseClients();

  RunEnd end;
  end.time_s = wall;
  end.samples = session.counters().samples.load();
  end.updates = session.counters().pushes.load();
  end.reason = reason;
  end.failed = failed;
  end.device = devices.Describe();
  end.ps_shards = store->ps_shards();
  end.transport = store->transport();
  std::vector<WorkerMetrics> metrics = run.Metrics();
  store.reset();
  return session.Finish(*problem.model, run.centre(), end, std::move(metrics), {}, out);
}

}  // namespace asgd::experiments
