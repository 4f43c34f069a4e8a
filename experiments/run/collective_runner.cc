#include "experiments/run/collective_runner.h"

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <thread>

#include "algorithms/schedule.h"
#include "algorithms/strategy.h"
#include "collective/collective.h"
#include "core/aligned.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "datasets/loader.h"
#include "datasets/partition.h"
#include "experiments/config/cluster_plan.h"
#include "experiments/config/setup.h"
#include "experiments/record/checkpoint.h"
#include "experiments/record/metrics.h"
#include "experiments/record/progress.h"
#include "experiments/record/run_core.h"
#include "experiments/record/run_dir.h"
#include "experiments/run/collective_rank.h"
#include "experiments/run/problem.h"
#include "experiments/run/run_session.h"
#include "experiments/run/thread_workers.h"
#include "experiments/run/worker_loop.h"
#include "models/factory.h"
#include "sim/delay_model.h"

namespace asgd::experiments {
namespace {

namespace alg = ::asgd::algorithms;
namespace col = ::asgd::collective;
using ::asgd::internal::StrCat;

// What the workers and the evaluating main thread share besides the session's counters.
struct Shared {
  std::atomic<bool> hold{false};        // the main thread wants an evaluation
  std::atomic<bool> checkpoint{false};  // the main thread wants a checkpoint (by seconds)
  std::mutex mu;
  std::condition_variable cv;
  // Guarded by mu.
  std::vector<float> average;  // the last published average θ̄ (rank 0 writes it)
  double consensus = 0;        // (1/N)·Σ‖θ_i − θ̄‖² at that point
  int64_t published = 0;       // publications so far
  int64_t boundary_step = 0;   // the last published boundary: its step and what it is for
  bool boundary_evaluates = false;
  bool boundary_checkpoints = false;
  int parked = 0;        // workers waiting for the evaluation to end
  int64_t releases = 0;  // evaluations ended
  int finished = 0;      // worker threads that returned
};

}  // namespace

void CheckCollectiveCheckpoint(const LoadedCheckpoint& c, int64_t n_params) {
  if (c.shards.size() != 1) {
    throw DataError(c.dir, StrCat("holds ", c.shards.size(),
                                  " shards, a run on a collective saves one (the average)"));
  }
  if (static_cast<int64_t>(c.shards[0].values.size()) != n_params) {
    throw DataError(c.dir, StrCat("holds ", c.shards[0].values.size(),
                                  " parameters, the model has ", n_params));
  }
}

void RefuseCurveOnCollective(const Config& config) {
  const std::string name = config.String("algorithm.name");
  if (!ClusterPlan::FromConfig(config).curve ||
      alg::FindStrategy(name).family != alg::Family::kGroup) {
    return;
  }
  throw ConfigError(ClusterPlan::kCurveKey, "true",
                    StrCat("false with algorithm.name = ", name,
                           ": its workers talk over gloo's TCP connections, which CURVE does "
                           "not cover (they are not encrypted)"));
}

void RefuseCollectiveRole(const Config& config, const std::string& role) {
  const std::string name = config.String("algorithm.name");
  if (alg::FindStrategy(name).family != alg::Family::kGroup) return;
  RefuseCurveOnCollective(config);
  if (role == "ps" || role == "evaluator") {
    throw ConfigError("algorithm.name", name,
                      StrCat("a strategy over the parameter server for the ", role, " role: ", name,
                             " runs on a collective of its workers, without shards or an "
                             "evaluator (start the coordinator and the workers only)"));
  }
}

namespace {

// One run of a strategy on a gloo collective of worker threads: what it adds to the run
// session. The workers park at the round boundaries where an evaluation or a checkpoint
// is due; the main thread evaluates or saves their average and lets them go on. It decides
// the time limit, the evaluations by seconds and the checkpoints, which the workers learn
// at their next vote.
class CollectiveRun {
 public:
  CollectiveRun(const Config& config, const Problem& problem, RunSession& session,
                const col::CollectiveOptions& co, const CollectivePlan& plan,
                const WorkerDevices& devices, Clock* clock, std::span<const float> initial)
      : config_(config),
        problem_(problem),
        session_(session),
        co_(co),
        plan_(plan),
        clock_(clock),
        initial_(initial),
        workers_(problem.plan.workers),
        threads_(problem, clock) {
    for (int w = 0; w < workers_; ++w) {
      WorkerSetup ws = MakeWorkerSetup(config, problem, w);
      ws.learning_rate = problem.plan.learning_rate;  // one rate: the replicas apply one step
      ws.model = devices.ModelOf(w, problem);
      ws.skip_batches = plan.first_step;  // a resumed run continues the batches' sequence
      threads_.Add(std::move(ws));
    }
  }

  // What the updates columns count for a strategy on a collective: communication rounds
  // (allreduce_sgd's allreduces, dpsgd's gossip steps, local_sgd's averagings), each of
  // which every worker takes part in, not the pushes summed over the workers.
  int64_t Rounds() const { return session_.counters().pushes.load() / workers_; }

  // Evaluates `params` (the workers' average) seen after `samples`, with the consensus
  // distance.
  void Evaluate(std::span<const float> params, double consensus, int64_t samples, bool full) {
    const double t = session_.Seconds();
    EvalInput in = session_.CountersAt(samples);
    in.updates = Rounds();
    in.consensus = consensus;
    if (session_.Evaluate(*problem_.model, params, in, t, full) &&
        session_.stop().stop_at_target()) {
      session_.counters().stop.store(true);
    }
    session_.eval_schedule().Evaluated(samples, t, full);
  }

  void Start() {
    session_.StartCheckpoints(workers_);  // a step of checkpoint_every_steps is a round
    threads_.Start([this](int w, WorkerLoop& loop) { Worker(w, loop); });
  }

  // The main thread until a worker returns. Returns the reason a limit gave (empty: the
  // workers stopped for their own reasons: the epochs, the target or a failure).
  std::string Supervise() {
    std::string reason;
    RunCounters& c = session_.counters();
    std::unique_lock<std::mutex> lock(shared_.mu);
    for (;;) {
      shared_.cv.wait_for(lock, std::chrono::milliseconds(5),
                          [&] { return shared_.parked == workers_ || shared_.finished > 0; });
      if (shared_.parked == workers_) {
        session_.training().Hold();
        const std::vector<float> average = shared_.average;
        const double consensus = shared_.consensus;
        const int64_t step = shared_.boundary_step;
        const bool evaluates = shared_.boundary_evaluates;
        const bool checkpoints = shared_.boundary_checkpoints;
        lock.unlock();
        // The evaluation first: the checkpoint's rows include it.
        if (evaluates) Evaluate(average, consensus, c.samples.load(), false);
        if (checkpoints) SaveCheckpoint(average, step);
        lock.lock();
        if (evaluates) shared_.hold.store(false);
        shared_.parked = 0;
        ++shared_.releases;
        shared_.cv.notify_all();
        session_.training().Release();
        continue;
      }
      if (shared_.finished > 0) break;
      lock.unlock();
      session_.staleness()->Flush();
      if (auto why =
              session_.stop().Check(c.samples.load(), c.steps.load(), session_.Seconds(), false);
          why && !c.stop.load()) {
        reason = *why;
        c.stop.store(true);
      }
      // By seconds only (samples 0): the workers hold themselves at the evaluations by
      // epochs.
      if (session_.eval_schedule().Due(0, session_.Seconds())) shared_.hold.store(true);
      if (session_.CheckpointDueBySeconds()) shared_.checkpoint.store(true);
      lock.lock();
    }
    // Workers still parked when a peer failed go on, into the failure.
    shared_.parked = 0;
    ++shared_.releases;
    shared_.cv.notify_all();
    lock.unlock();
    c.stop.store(true);
    threads_.Join();
    return reason;
  }

  // One "shard" holding θ̄, its version the steps every worker took (the boundary), in the
  // checkpoint format of the other runners (experiments/record/checkpoint.h), its folder
  // named by the rounds. Called while the workers are parked at that boundary (or have
  // ended there), so the counters and the staleness rows are exactly those of the steps
  // before it.
  void SaveCheckpoint(const std::vector<float>& average, int64_t step) {
    RunCounters& c = session_.counters();
    CheckpointManifest m = session_.NewManifest();
    m.rounds = Rounds();
    session_.staleness()->Flush();
    SetManifestCounters(m, {c.pushes.load(), c.steps.load(), c.samples.load(), session_.Seconds()},
                        session_.staleness());
    for (const auto& loop : threads_.loops()) m.workers.push_back(loop->Snapshot());
    ps::ShardSnapshot snap;
    snap.version = static_cast<uint64_t>(step);
    snap.values = average;
    session_.SaveCheckpoint(std::move(m), {snap});
    session_.CheckpointSaved(c.pushes.load());
    shared_.checkpoint.store(false);
  }

  const std::vector<float>& average() const { return shared_.average; }
  double consensus() const { return shared_.consensus; }
  int64_t boundary_step() const { return shared_.boundary_step; }
  std::vector<WorkerMetrics> Metrics() const { return threads_.Metrics(); }

 private:
  void Worker(int w, WorkerLoop& loop) {
    RunCounters& c = session_.counters();
    WorkerOutcome outcome;
    try {
      col::CollectiveOptions mine = co_;
      mine.rank = w;
      const std::unique_ptr<col::Collective> payload = col::Connect(mine, payload_rendezvous_);
      const std::unique_ptr<col::Collective> control = col::Connect(mine, control_rendezvous_);
      CollectiveRankHooks hooks;
      hooks.stop_wanted = [&] { return c.stop.load(); };
      hooks.eval_wanted = [&]() -> int64_t { return shared_.hold.load() ? 1 : 0; };
      hooks.checkpoint_wanted = [&] {
        return shared_.checkpoint.load() || session_.CheckpointDueByPushes(c.pushes.load());
      };
      hooks.boundary = [&](const CollectiveBoundary& b) { Boundary(w, b); };
      hooks.after_step = [&](const alg::StepResult& r, int64_t batch, int64_t step) {
        c.AddStep(batch, r.local_steps, r.pushes, r.loss);
        // No update is stale: each applies a gradient to the parameters it was computed on.
        ps::StalenessRecord rec;
        rec.worker = static_cast<uint32_t>(w);
        rec.step = step;
        rec.pulled_version = static_cast<uint64_t>(step - 1);
        rec.applied_version = rec.pulled_version;
        rec.wall_time_s = std::chrono::duration<double>(clock_->Now()).count();
        session_.staleness()->Record(rec);
      };
      outcome = RunCollectiveRank(loop, plan_, w, *payload, *control, initial_, hooks);
    } catch (const std::exception& e) {
      outcome.failure = StrCat("worker ", w, ": ", e.what());
    }
    if (!outcome.failure.empty()) c.Fail(outcome.failure);
    std::lock_guard<std::mutex> lock(shared_.mu);
    ++shared_.finished;
    shared_.cv.notify_all();
  }

  // Rank 0 publishes the boundary's average; every rank is then held until the main
  // thread evaluated the average or saved it (not after the final one).
  void Boundary(int w, const CollectiveBoundary& b) {
    std::unique_lock<std::mutex> lock(shared_.mu);
    if (w == 0) {
      shared_.average.assign(b.average.begin(), b.average.end());
      shared_.consensus = b.consensus;
      shared_.boundary_step = b.step;
      shared_.boundary_evaluates = b.evaluate;
      shared_.boundary_checkpoints = b.checkpoint;
      ++shared_.published;
    }
    if (b.final) return;
    const int64_t releases = shared_.releases;
    ++shared_.parked;
    shared_.cv.notify_all();
    shared_.cv.wait(lock, [&] { return shared_.releases != releases; });
  }

  const Config& config_;
  const Problem& problem_;
  RunSession& session_;
  const col::CollectiveOptions co_;
  const CollectivePlan& plan_;
  Clock* clock_;
  std::span<const float> initial_;
  const int workers_;
  const std::shared_ptr<col::Rendezvous> payload_rendezvous_ = col::NewInMemoryRendezvous();
  const std::shared_ptr<col::Rendezvous> control_rendezvous_ = col::NewInMemoryRendezvous();
  Shared shared_;
  ThreadWorkers threads_;  // last: its threads end before the members they use go
};

}  // namespace

RunResult RunCollective(const Config& config, const RunRequest& request, std::ostream& out) {
  RefuseCurveOnCollective(config);
  const Problem problem = LoadProblem(config, request);  // validated before the folder
  const RunPlan& rp = problem.plan;
  const col::CollectiveOptions& co = rp.collective;
  const WorkerDevices devices = MakeWorkerDevices(config, problem);
  CollectivePlan plan = CollectivePlan::Make(rp, problem.strategy_options, problem.partitions,
                                             problem.data.train.num_examples);
  auto clock = NewSystemClock();
  SessionOptions options;
  options.clock = clock.get();
  RunSession session(config, request, problem, options);
  // A resumed run continues from its checkpoint: the workers' average at a round boundary.
  AlignedVector<float> initial(static_cast<std::size_t>(problem.n_params));
  if (session.resuming()) {
    CheckCollectiveCheckpoint(session.resume(), problem.n_params);
    plan.first_step = static_cast<int64_t>(session.resume().shards[0].version);
    const auto& v = session.resume().shards[0].values;
    std::copy(v.begin(), v.end(), initial.begin());
  } else {
    problem.model->Initialize(initial, DeriveSeed(rp.seed, "init"));
  }
  session.training().Start();
  ASGD_LOG(kInfo, "run ", session.run().id(), ": ", rp.name, " with ", rp.workers,
           " workers on gloo (", col::AlgorithmName(co.algorithm), ", tcp over 127.0.0.1), ",
           problem.model->Describe(), " (workers on ", devices.Describe(), "), ",
           problem.data.train.name, " (", problem.data.train.num_examples, " examples)");

  CollectiveRun run(config, problem, session, co, plan, devices, clock.get(), initial);
  // Every worker starts here (the broadcast). A resumed run adds no row: the checkpoint's
  // rows are those of the run before it, as if it had not stopped.
  // Held as every other evaluation is: the full test set at θ₀ is not training time.
  if (!session.resuming()) {
    session.training().Hold();
    run.Evaluate(initial, 0.0, 0, false);
    session.training().Release();
  }
  session.eval_schedule().SetLastTime(session.Seconds());
  run.Start();
  std::string reason = run.Supervise();
  const double wall = session.Seconds();
  const int64_t samples = session.counters().samples.load();
  const std::string failure = session.counters().failure();
  const bool failed = !failure.empty();
  if (failed) {
    reason = failure;
  } else {
    if (reason.empty()) {
      reason = session.stop()
                   .Check(samples, session.counters().steps.load(), wall,
                          session.recorder().time_to_target_s() >= 0)
                   .value_or(session.stop().TargetReason());
    }
    // The workers published their final average when they voted to stop.
    run.Evaluate(run.average(), run.consensus(), samples, true);
    // A finished run's last checkpoint: `--resume` with more epochs extends it.
    if (rp.checkpointing()) run.SaveCheckpoint(run.average(), run.boundary_step());
  }

  RunEnd end;
  end.time_s = wall;
  end.samples = samples;
  end.updates = run.Rounds();
  end.reason = reason;
  end.failed = failed;
  end.device = devices.Describe();
  end.ps_shards = 0;
  end.transport = StrCat("gloo-", col::AlgorithmName(co.algorithm));
  end.updates_word = "communication rounds";
  end.staleness_word = "worker steps";
  char tail[64];
  std::snprintf(tail, sizeof(tail), "; consensus distance %.3g", run.consensus());
  end.tail = tail;
  return session.Finish(*problem.model, run.average(), end, run.Metrics(), {}, out);
}

}  // namespace asgd::experiments
