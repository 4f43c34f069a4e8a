#include "experiments/run/family_session.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <utility>
#include <vector>

#include "algorithms/exchange.h"
#include "core/aligned.h"
#include "core/check.h"
#include "core/error.h"
#include "core/rng.h"
#include "experiments/record/checkpoint.h"
#include "experiments/run/collective_rank.h"
#include "experiments/run/collective_runner.h"

namespace asgd::experiments {
namespace {

namespace alg = ::asgd::algorithms;
using ::asgd::internal::StrCat;

// The store family: the workers' exchanges over the store's clients; the driver reads the
// centre when its schedule says.
class StoreSession final : public FamilySession {
 public:
  StoreSession(const Problem& problem, RunSession& session)
      : problem_(problem), session_(session), centre_(static_cast<std::size_t>(problem.n_params)) {}

  void Open(Fabric& fabric, std::span<float> initial) override {
    const RunPlan& plan = problem_.plan;
    problem_.model->Initialize(initial, DeriveSeed(plan.seed, "init"));
    store_ = fabric.NewStore(initial);
    if (session_.resuming()) store_->Restore(session_.resume().shards, session_.resume().dir);
    for (int w = 0; w < plan.workers; ++w) {
      clients_.push_back(store_->NewClient(static_cast<uint32_t>(w), ps::Role::kWorker));
      exchanges_.push_back(alg::NewStoreExchange(clients_.back().get()));
    }
  }

  std::string Describe(const Fabric& /*fabric*/) const override { return store_->Describe(); }

  // A resumed run's workers draw fresh batches (RunSession::WorkerSeed).
  void SetUp(int /*w*/, WorkerSetup& setup) const override {
    setup.seed = session_.WorkerSeed();
    setup.sparse = UsesSparseUpdates(problem_);
  }

  int64_t PushesPerStep() const override { return 1; }

  WorkerOutcome Work(int w, WorkerLoop& loop, Fabric& /*fabric*/, Pace& pace) override {
    WorkerRecord record;
    record.step = [&c = session_.counters()](const alg::StepResult& r, int64_t batch, int64_t) {
      c.AddStep(batch, r.local_steps, r.pushes, r.loss);
    };
    return WorkAsStoreWorker(loop, *exchanges_[static_cast<std::size_t>(w)], pace, record);
  }

  std::optional<RunPoint> FirstPoint(std::span<const float> /*initial*/, int64_t samples) override {
    return ReadNow(samples);
  }

  bool EvaluationDue(EvalSchedule& schedule, int64_t samples, double seconds) const override {
    return schedule.Due(samples, seconds);
  }

  std::optional<RunPoint> ReadNow(int64_t samples) override {
    const ps::Status st = store_->Read(centre_);
    if (!st.ok()) {
      session_.counters().Fail("evaluator: reading the centre: " + st.ToString());
      return std::nullopt;
    }
    RunPoint p;
    p.params = centre_;
    p.samples = samples;
    return p;
  }

  std::optional<RunPoint> FinalPoint(int64_t samples) override { return ReadNow(samples); }

  std::span<const float> LastParams() const override { return centre_; }

  void Annotate(const RunPoint& /*point*/, EvalInput& /*in*/) const override {}

  // The store's snapshots with the counters and the staleness records read while every
  // shard is held, so they describe exactly the pushes the snapshots contain (the workers'
  // own counters may run a step ahead: they are for workers.csv, not for the model).
  void SaveCheckpoint(const RunPoint* /*point*/,
                      std::span<const std::unique_ptr<WorkerLoop>> loops) override {
    RunCounters& c = session_.counters();
    const int64_t pushes = c.pushes.load();
    StalenessRecorder& staleness = *session_.staleness();
    CheckpointManifest m = session_.NewManifest();
    const std::vector<ps::ShardSnapshot> shards = store_->Snapshot([&] {
      SetManifestCounters(
          m, {c.pushes.load(), c.steps.load(), c.samples.load(), session_.Seconds()}, &staleness);
    });
    for (const auto& loop : loops) m.workers.push_back(loop->Snapshot());
    if (!problem_.plan.strategy->synchronous) {
      CountPushesFromRecords(m, shards.size(), session_.resume().manifest.workers);
    }
    session_.SaveCheckpoint(std::move(m), shards);
    session_.CheckpointSaved(pushes);
  }

  // Synchronous strategies hold workers in rounds: the store is closed, so that a worker
  // waiting for peers that already stopped is answered (kShuttingDown).
  void Release() override {
    if (problem_.plan.strategy->synchronous) store_->Close();
  }

  void Describe(RunEnd& end, const Fabric& /*fabric*/) const override {
    end.updates = session_.counters().pushes.load();
    end.ps_shards = store_->ps_shards();
    end.transport = store_->transport();
  }

  // The exchanges' chains go before the store's clients under them, and those before it.
  void Close() override {
    exchanges_.clear();
    clients_.clear();
    store_.reset();
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
  AlignedVector<float> centre_;  // the last centre read
  std::unique_ptr<ps::ParamStore> store_;
  std::vector<std::unique_ptr<ps::ParamClient>> clients_;  // the store's, one per worker
  std::vector<std::unique_ptr<alg::Exchange>> exchanges_;  // over clients_, one per worker
};

// The group family: each worker a rank of RunCollectiveRank on the fabric's groups; the
// driver reads the average the ranks publish at the boundaries they agree on.
class GroupSession final : public FamilySession {
 public:
  GroupSession(const Problem& problem, RunSession& session)
      : problem_(problem), session_(session) {}

  // A resumed run continues from its checkpoint: the workers' average at a round boundary,
  // its version the steps every worker took.
  void Open(Fabric& /*fabric*/, std::span<float> initial) override {
    plan_ = CollectivePlan::Make(problem_.plan, problem_.strategy_options, problem_.partitions,
                                 problem_.data.train.num_examples);
    if (session_.resuming()) {
      CheckCollectiveCheckpoint(session_.resume(), problem_.n_params);
      plan_.first_step = static_cast<int64_t>(session_.resume().shards[0].version);
      const auto& v = session_.resume().shards[0].values;
      std::copy(v.begin(), v.end(), initial.begin());
      // The rounds before it: the restored pushes are every worker's.
      rounds_.store(session_.counters().pushes.load() / problem_.plan.workers);
    } else {
      problem_.model->Initialize(initial, DeriveSeed(problem_.plan.seed, "init"));
    }
    initial_ = initial;
  }

  std::string Describe(const Fabric& fabric) const override { return fabric.DescribeGroup(); }

  // One rate (the replicas apply one step); a resumed run continues each worker's batches.
  void SetUp(int /*w*/, WorkerSetup& setup) const override {
    setup.learning_rate = problem_.plan.learning_rate;
    setup.skip_batches = plan_.first_step;
  }

  int64_t PushesPerStep() const override { return problem_.plan.workers; }

  WorkerOutcome Work(int w, WorkerLoop& loop, Fabric& fabric, Pace& pace) override {
    WorkerRecord record;
    record.point = [this](const RunPoint& p) {
      if (p.rank != 0) return;
      average_.assign(p.params.begin(), p.params.end());
      consensus_ = p.consensus;
      boundary_step_ = p.step;
    };
    record.step = [this, &fabric, w](const alg::StepResult& r, int64_t batch, int64_t step) {
      session_.counters().AddStep(batch, r.local_steps, r.pushes, r.loss);
      // Rank 0's communication rounds: every rank takes part in every round, so these
      // are the run's rounds (the updates column), exact at the boundaries.
      if (w == 0) rounds_.fetch_add(r.pushes, std::memory_order_relaxed);
      // No update is stale: each applies a gradient to the parameters it was computed on.
      ps::StalenessRecord rec;
      rec.worker = static_cast<uint32_t>(w);
      rec.step = step;
      rec.pulled_version = static_cast<uint64_t>(step - 1);
      rec.applied_version = rec.pulled_version;
      rec.wall_time_s = fabric.StepTime();
      session_.staleness()->Record(rec);
    };
    return WorkAsRank(plan_, w, loop, fabric, pace, initial_, record);
  }

  // Every worker starts here (the broadcast). A resumed run adds no row: the checkpoint's
  // rows are those of the run before it, as if it had not stopped.
  std::optional<RunPoint> FirstPoint(std::span<const float> initial, int64_t /*samples*/) override {
    if (session_.resuming()) return std::nullopt;
    RunPoint p;
    p.params = initial;
    p.consensus = 0;
    return p;
  }

  // By seconds only (samples 0): the ranks hold themselves at the evaluations by epochs.
  bool EvaluationDue(EvalSchedule& schedule, int64_t /*samples*/, double seconds) const override {
    return schedule.Due(0, seconds);
  }

  std::optional<RunPoint> ReadNow(int64_t /*samples*/) override { return std::nullopt; }

  // The workers published their final average when they voted to stop.
  std::optional<RunPoint> FinalPoint(int64_t samples) override {
    RunPoint p;
    p.params = average_;
    p.samples = samples;
    p.step = boundary_step_;
    p.final = true;
    p.consensus = consensus_;
    return p;
  }

  std::span<const float> LastParams() const override { return average_; }

  // What the updates columns count for a strategy on a collective: communication rounds
  // (allreduce_sgd's allreduces, dpsgd's gossip steps, local_sgd's averagings), each of
  // which every worker takes part in, not the pushes summed over the workers.
  void Annotate(const RunPoint& point, EvalInput& in) const override {
    in.updates = rounds_.load(std::memory_order_relaxed);
    in.consensus = point.consensus;
  }

  // One "shard" holding θ̄, its version the steps every worker took (the boundary), in the
  // checkpoint format of the store (experiments/record/checkpoint.h), its folder named by
  // the rounds. Called while the workers wait at that boundary (or have ended there), so
  // the counters and the staleness rows are exactly those of the steps before it.
  void SaveCheckpoint(const RunPoint* point,
                      std::span<const std::unique_ptr<WorkerLoop>> loops) override {
    ASGD_CHECK(point != nullptr, "a group's checkpoint is its average at a boundary");
    RunCounters& c = session_.counters();
    CheckpointManifest m = session_.NewManifest();
    m.rounds = rounds_.load(std::memory_order_relaxed);
    session_.staleness()->Flush();
    SetManifestCounters(m, {c.pushes.load(), c.steps.load(), c.samples.load(), session_.Seconds()},
                        session_.staleness());
    for (const auto& loop : loops) m.workers.push_back(loop->Snapshot());
    ps::ShardSnapshot snap;
    snap.version = static_cast<uint64_t>(point->step);
    snap.values.assign(point->params.begin(), point->params.end());
    session_.SaveCheckpoint(std::move(m), {snap});
    session_.CheckpointSaved(c.pushes.load());
  }

  void Release() override {}

  void Describe(RunEnd& end, const Fabric& fabric) const override {
    end.updates = rounds_.load(std::memory_order_relaxed);
    end.ps_shards = 0;
    end.transport = fabric.GroupTransport();
    end.updates_word = "communication rounds";
    end.staleness_word = "worker steps";
    char tail[64];
    std::snprintf(tail, sizeof(tail), "; consensus distance %.3g", consensus_);
    end.tail = tail;
  }

  void Close() override {}

 private:
  const Problem& problem_;
  RunSession& session_;
  CollectivePlan plan_;
  std::span<const float> initial_;
  std::atomic<int64_t> rounds_{0};
  // The last boundary's θ̄, its consensus distance and step (rank 0 publishes them).
  std::vector<float> average_;
  double consensus_ = 0;
  int64_t boundary_step_ = 0;
};

}  // namespace

WorkerOutcome WorkAsStoreWorker(WorkerLoop& loop, alg::Exchange& exchange, Pace& pace,
                                const WorkerRecord& record) {
  WorkerHooks hooks;
  hooks.before_step = [&pace](double* lr_scale) { return pace.MayStep(lr_scale); };
  hooks.recover = [&pace](const ps::Status& st) { return pace.Recover(st); };
  int64_t steps = 0;
  hooks.after_step = [&pace, &record, &steps](const alg::StepResult& r, int64_t batch) {
    ++steps;
    if (record.step) record.step(r, batch, steps);
    pace.Stepped();
  };
  // After the run ended, a synchronous worker's pending request is answered with
  // kShuttingDown: that is the end of its last round, not a failure.
  hooks.ending = [&pace] { return pace.Ended(); };
  return loop.Run(exchange, hooks);
}

WorkerOutcome WorkAsRank(const CollectivePlan& plan, int w, WorkerLoop& loop, Fabric& fabric,
                         Pace& pace, std::span<const float> initial, const WorkerRecord& record) {
  WorkerOutcome outcome;
  try {
    const std::unique_ptr<collective::Collective> payload = fabric.Payload(w);
    const std::unique_ptr<collective::Collective> control = fabric.Control(w);
    CollectiveRankHooks hooks;
    hooks.stop_wanted = [&pace] { return pace.StopWanted(); };
    hooks.eval_wanted = [&pace, w] { return pace.EvalWanted(w); };
    hooks.checkpoint_wanted = [&pace] { return pace.CheckpointWanted(); };
    hooks.boundary = [&pace, &record](const CollectiveBoundary& b) {
      RunPoint p;
      p.rank = b.rank;
      p.params = b.average;
      p.samples = b.samples;
      p.step = b.step;
      p.final = b.final;
      p.evaluate = b.evaluate;
      p.checkpoint = b.checkpoint;
      p.eval_id = b.eval_id;
      p.consensus = b.consensus;
      if (record.point) record.point(p);
      pace.AtPoint(p);
    };
    hooks.after_step = [&pace, &record](const alg::StepResult& r, int64_t batch, int64_t step) {
      if (record.step) record.step(r, batch, step);
      pace.Stepped();
    };
    outcome = RunCollectiveRank(loop, plan, w, *payload, *control, initial, hooks);
  } catch (const std::exception& e) {
    outcome.failure = StrCat("worker ", w, ": ", e.what());
  }
  return outcome;
}

std::unique_ptr<FamilySession> NewFamilySession(const Problem& problem, RunSession& session) {
  switch (problem.plan.family) {
    case alg::Family::kStore:
      return std::make_unique<StoreSession>(problem, session);
    case alg::Family::kGroup:
      return std::make_unique<GroupSession>(problem, session);
    case alg::Family::kSequential:
      break;
  }
  ASGD_CHECK(false, "the sequential baseline has no family session");
  return nullptr;
}

}  // namespace asgd::experiments
