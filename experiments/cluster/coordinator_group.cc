// GroupFamily: the coordinator of a strategy on a collective (algorithms::Family::kGroup).
// No shards and no evaluator: the workers are the ranks, meet in a file store of the run
// folder, and rank 0 evaluates the workers' average and saves it for a checkpoint.
#include <algorithm>
#include <filesystem>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "experiments/cluster/coordinator.h"
#include "experiments/run/collective_rank.h"
#include "experiments/run/collective_runner.h"
#include "experiments/run/evaluation.h"

namespace asgd::experiments::cluster {

namespace col = ::asgd::collective;
using ::asgd::internal::StrCat;

class GroupFamily final : public CoordinatorFamily {
 public:
  explicit GroupFamily(Coordinator& c) : c_(c) {}

  void Expect() override {
    staleness_steps_.assign(static_cast<std::size_t>(c_.s_.problem.plan.workers), 0);
    const Problem& p = c_.s_.problem;
    plan_ = CollectivePlan::Make(p.plan, p.strategy_options, p.partitions, p.data.train.num_examples);
  }

  void Opened() override {
    if (c_.session_->resuming()) {
      // Every rank restores the checkpoint's average: it must be the model's.
      CheckCollectiveCheckpoint(c_.session_->resume(), c_.s_.problem.model->layout().size());
      first_step_ = static_cast<int64_t>(c_.session_->resume().shards[0].version);
    }
    // The ranks' file store: a fresh folder of the run for each attempt (absolute: the
    // workers may run elsewhere on a shared file system).
    namespace fs = std::filesystem;
    const fs::path dir = fs::absolute(fs::path(c_.session_->path()) / "rendezvous");
    std::error_code ec;
    fs::remove_all(dir, ec);
    for (const char* group : {"payload", "control"}) {
      fs::create_directories(dir / group, ec);
      if (ec) throw IoError(StrCat("cannot create ", (dir / group).string(), ": ", ec.message()));
    }
    dir_ = dir.string();
  }

  std::string Shape() const override {
    return StrCat("on gloo (", col::AlgorithmName(c_.s_.problem.plan.collective.algorithm), ")");
  }
  // A collective's checkpoint is the workers' average: one snapshot.
  int CheckpointShards() const override { return 1; }
  // A round is a push of every rank.
  int64_t PushesPerStep() const override { return c_.s_.problem.plan.workers; }
  // Communication rounds: every rank pushes once in each.
  int64_t Recorded(int64_t pushes) const override { return pushes / c_.s_.problem.plan.workers; }

  void Registered(const Key& key, bool restarted, RegisterReply& reply) override {
    if (key.first != "worker") return;
    reply.collective_dir = dir_;
    const CheckpointManifest* resumed = c_.Resumed();
    if (resumed != nullptr && !restarted) {
      // Every rank of a resumed run on a collective starts from the saved average.
      const auto& entry = resumed->shards[0];
      reply.restore =
          RestoreOrder{c_.last_complete_dir_ + "/" + entry.file, entry.sha256, entry.version};
    }
    // Rank 0 evaluates, and writes the models.
    if (key.second == 0 && c_.s_.problem.model->CanSave()) {
      reply.save_dir = c_.session_->path();
      reply.best_above = c_.session_->recorder().best_test_accuracy();
    }
  }

  void WorkerReported(const WorkerReport& msg) override {
    const int w = msg.task;
    Staleness(w, msg.metrics.steps);
    if (msg.evaluation) {
      CollectiveEvaluation e = *msg.evaluation;
      // Rank 0 counts its own process's pushes.
      if (const CheckpointManifest* resumed = c_.Resumed()) e.updates += resumed->step;
      Evaluated(e);
    }
    if (msg.saved && w == 0 && c_.ckpt_ && msg.saved->shard.step == c_.ckpt_->manifest.step) {
      CompleteCheckpoint(*msg.saved);
    }
  }

  // On a collective every rank fails when one dies: which one is decided once the others
  // have ended or gone quiet (Check).
  void WorkerFailed(int w, const std::string& why) override { failures_.emplace_back(w, why); }

  void FillReply(int w, WorkerReply& reply) override {
    const bool running = c_.phase_ == Coordinator::Phase::kRunning;
    // Rank 0 answers an evaluation or a checkpoint at its next boundary.
    if (c_.pending_ && running) reply.evaluate = c_.Order(*c_.pending_);
    if (c_.ckpt_ && running) {
      reply.checkpoint = CheckpointOrder{c_.ckpt_->manifest.step, c_.ckpt_->dir};
    }
    if (w == 0 && c_.s_.problem.model->CanSave()) {
      reply.best_above = c_.session_->recorder().best_test_accuracy();
    }
  }

  void NameCheckpoint(CheckpointManifest& m, int64_t pushes) const override {
    // Named by rounds. Rank 0 takes it at its next vote, and that boundary's rounds name
    // the complete folder (CompleteCheckpoint). Until then the folder is named past the
    // newest complete checkpoint: the reports lag the ranks, so pushes / N may still be
    // at or below that one's rounds, and rank 0 must not write into it.
    const auto& last = c_.last_complete_;
    const int64_t after = last && last->rounds >= 0 ? last->rounds + 1 : 0;
    m.rounds = std::max(pushes / c_.s_.problem.plan.workers, after);
  }

  void Evaluate(bool full) override {
    // Rank 0 answers an evaluation asked for while training (WorkerReply::evaluate). The
    // initial one is of the parameters every rank starts from (rank 0's, broadcast),
    // which every process derives from the seed: evaluated here.
    if (c_.phase_ == Coordinator::Phase::kRunning) return;
    if (c_.Resumed() != nullptr) {
      c_.pending_.reset();  // a resumed run adds no row at its start (as `asgd run`)
      return;
    }
    const Problem& p = c_.s_.problem;
    const std::vector<float> initial = c_.s_.Initial();
    const models::EvalResult r = EvaluateOn(*p.model, initial, p.EvalSet(full), p.data.train);
    const double best_before = c_.session_->recorder().best_test_accuracy();
    c_.Evaluated(r, /*consensus_distance=*/0.0);
    SaveBestModel(*p.model, initial, r.accuracy(), best_before, c_.session_->path());
  }

  bool Start() override { return true; }

  void Check() override {
    if (failures_.empty() || !c_.failure_.empty()) return;
    // A live process reports every cluster.report_interval_s (its reporter thread, even
    // while its training thread waits in a collective call); quiet for three of them is
    // a process that died or stopped.
    const auto quiet = std::max<milliseconds>(3 * c_.s_.report_interval, milliseconds(500));
    std::string silent;
    std::vector<Coordinator::Role*> lost;
    for (auto& [key, role] : c_.roles_) {
      if (key.first != "worker" || role.done) continue;
      if (!role.dead && Steady::now() - role.last_seen <= quiet) return;  // it may still fail
      silent += (silent.empty() ? "" : ", ") + c_.Describe(key);
      lost.push_back(&role);
    }
    const std::string& first = failures_.front().second;
    if (!silent.empty()) {
      for (Coordinator::Role* role : lost) role->dead = true;  // not waited for
      c_.Fail(StrCat(silent,
                     " left the collective (it died or stopped answering): a collective "
                     "cannot lose a member; ",
                     first));
      return;
    }
    // Every rank ended: the one whose failure is not the collective's (a NaN loss) caused it.
    for (const auto& [w, why] : failures_) {
      if (why.find("collective: rank") == std::string::npos) {
        c_.Fail(why);
        return;
      }
    }
    c_.Fail(first);
  }

  // The ranks stopped together at their limit (they decide epochs and max_steps
  // themselves, from their step count).
  bool WorkersEnded() const override { return c_.All("worker", Coordinator::Finished); }
  // The ranks hold themselves at the evaluations by epochs: here by seconds only.
  int64_t ScheduleSamples(int64_t) const override { return 0; }

  void WorkersFinished() override {
    if (!c_.failure_.empty()) {
      c_.Enter(Coordinator::Phase::kStoppingShards);
    } else if (!failures_.empty()) {
      return;  // Check decides
    } else if (!final_eval_) {
      c_.Fail("worker 0 ended without the final evaluation of the workers' average");
      c_.Enter(Coordinator::Phase::kStoppingShards);
    } else {
      // The parameters the ranks stopped at: the row's samples and updates are theirs.
      CollectiveEvaluation last = *final_eval_;
      last.full = false;  // written now
      Evaluated(last);
      c_.Enter(Coordinator::Phase::kStoppingShards);
    }
  }

  std::string WorkerLossFatal() const override { return "a collective cannot lose a member"; }

  void End(RunEnd& end) const override {
    end.ps_shards = 0;
    end.transport = StrCat("gloo-", col::AlgorithmName(c_.s_.problem.plan.collective.algorithm));
    end.updates_word = "communication rounds";
    end.staleness_word = "worker steps";
  }

  void Cleanup() override {
    // The ranks' file store is of no use once they ended.
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

 private:
  // Rank 0's evaluation of the workers' average; the final one (full) is kept for the end
  // of the run.
  void Evaluated(const CollectiveEvaluation& e) {
    if (e.full) {
      final_eval_ = e;  // written once every worker ended (kStoppingWorkers)
      return;
    }
    models::EvalResult r;
    r.loss_sum = e.loss_sum;
    r.correct = e.correct;
    r.count = e.count;
    Coordinator::PendingEval p;
    p.id = e.id;
    p.time_s = c_.Elapsed();
    p.samples = e.samples;
    p.updates = Recorded(e.updates);  // the pushes of every rank: rounds
    p.train_loss = c_.TakeTrainLoss();
    auto& pending = c_.pending_;
    const bool answers = pending && pending->id == e.id;
    const std::optional<Coordinator::PendingEval> waiting = answers ? std::nullopt : pending;
    pending = p;
    c_.Evaluated(r, e.consensus_distance);
    pending = waiting;  // an evaluation by epochs does not answer the one asked for
    if (c_.phase_ == Coordinator::Phase::kRunning) {
      c_.session_->eval_schedule().Evaluated(e.samples, p.time_s, false);
    }
  }

  // Rank 0 wrote the checkpoint asked for: the manifest's counters are the boundary's.
  void CompleteCheckpoint(const CollectiveSaved& saved) {
    // The boundary's counters, alike on every rank: v steps each, the partitions' samples,
    // rank 0's pushes (every rank pushes alike) on top of a resumed run's.
    const int64_t v = static_cast<int64_t>(saved.shard.version);
    const int64_t n = c_.s_.problem.plan.workers;
    CheckpointManifest& m = c_.ckpt_->manifest;
    const CheckpointManifest* resumed = c_.Resumed();
    const int64_t pushes = (resumed != nullptr ? resumed->step : 0) + saved.pushes * n;
    const double time_s = c_.Elapsed();
    // Every worker took v steps: their rows up to v are written now (the reports lag), so
    // that a resume, which keeps the rows of steps <= v, has each of them.
    for (int w = 0; w < n; ++w) Staleness(w, v - first_step_);
    SetManifestCounters(m, {pushes, v * n, plan_->SamplesAtStep(v), time_s},
                        c_.session_->staleness());
    m.rounds = m.step / n;
    SetManifestAccount(m, c_.session_->recorder());  // as of now: rows written since the request
    m.workers.clear();
    for (std::size_t w = 0; w < c_.workers_.size(); ++w) {
      WorkerMetrics x = c_.Total(w);  // times and bytes as last reported
      x.steps = v;
      x.samples = plan_->SamplesAtStep(v, static_cast<int>(w));
      x.pushes = m.step / n;
      m.workers.push_back(x);
    }
    CheckpointManifest::Shard e;
    e.file = saved.shard.file;
    e.sha256 = saved.shard.sha256;
    e.version = saved.shard.version;
    e.elements = saved.shard.elements;
    c_.ckpt_->saved[0] = e;
    // The folder was named when asked for; the manifest's rounds are the boundary's, and
    // the folder carries them.
    const std::string dir = c_.session_->checkpointer()->Folder(m);
    if (dir != c_.ckpt_->dir) {
      std::error_code ec;
      std::filesystem::rename(c_.ckpt_->dir, dir, ec);
      if (ec) {
        ASGD_LOG(kError, "coordinator: checkpoint failed: cannot move ", c_.ckpt_->dir, " to ", dir,
                 ": ", ec.message());
        c_.ckpt_.reset();
        return;
      }
      c_.ckpt_->dir = dir;
    }
    c_.CompleteCheckpoint();
  }

  // One staleness-0 row per worker step (no update on a collective is stale). steps: this
  // run's own (a resumed run's workers count from its checkpoint's boundary).
  void Staleness(int worker, int64_t steps) {
    int64_t& recorded = staleness_steps_[static_cast<std::size_t>(worker)];
    StalenessRecorder* staleness = c_.session_->staleness();
    for (; recorded < steps; ++recorded) {
      ps::StalenessRecord rec;
      rec.worker = static_cast<uint32_t>(worker);
      rec.step = first_step_ + recorded + 1;
      rec.pulled_version = static_cast<uint64_t>(first_step_ + recorded);
      rec.applied_version = rec.pulled_version;
      rec.wall_time_s = c_.Elapsed();
      staleness->Record(rec);
    }
    staleness->Flush();
  }

  Coordinator& c_;
  std::string dir_;                                    // the ranks' file store, in the run folder
  std::vector<std::pair<int, std::string>> failures_;  // in arrival order
  std::optional<CollectiveEvaluation> final_eval_;
  std::vector<int64_t> staleness_steps_;  // per worker: steps with a staleness row
  std::optional<CollectivePlan> plan_;    // the ranks' plan (samples at a step)
  int64_t first_step_ = 0;                // a resumed run's: its checkpoint's boundary
};

std::unique_ptr<CoordinatorFamily> NewGroupFamily(Coordinator& c) {
  return std::make_unique<GroupFamily>(c);
}

}  // namespace asgd::experiments::cluster
