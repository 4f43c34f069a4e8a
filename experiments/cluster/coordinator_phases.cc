#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "experiments/cluster/coordinator.h"

namespace asgd::experiments::cluster {

using ::asgd::internal::StrCat;

// ---- checkpoints (multi-process): the coordinator asks, each snapshot's process saves its
// own file into the folder, the coordinator writes the manifest once all have. ---------
void Coordinator::MaybeCheckpoint() {
  Checkpointer* checkpointer = session_->checkpointer();
  if (ckpt_ || paused_ || checkpointer == nullptr) return;
  const int64_t updates = Updates();
  if (!session_->CheckpointDue(updates) || updates == last_ckpt_step_) return;
  Checkpoint request;
  const CheckpointManifest* resumed = Resumed();
  request.manifest =
      ManifestOfRun(s_.problem.plan.strategy->name, s_.problem.plan.config_hash,
                    resumed != nullptr ? resumed->resumes + 1 : 0, session_->recorder());
  CheckpointManifest& m = request.manifest;
  // The file holds the rows the manifest names before any snapshot is saved (and so
  // before CompleteCheckpoint writes the manifest).
  session_->staleness()->Flush();
  SetManifestCounters(m, {updates, Steps(), Samples(), Elapsed()}, session_->staleness());
  for (std::size_t w = 0; w < workers_.size(); ++w) m.workers.push_back(Total(w));
  family_->NameCheckpoint(m, updates);
  request.dir = checkpointer->Folder(m);
  request.since = Steady::now();
  ckpt_ = std::move(request);
  last_ckpt_step_ = updates;
  session_->CheckpointSaved(updates);
}

void Coordinator::CompleteCheckpoint() {
  CheckpointManifest m = ckpt_->manifest;
  m.shards.clear();
  for (const auto& [ps, entry] : ckpt_->saved) m.shards.push_back(entry);
  try {
    const std::string dir = session_->checkpointer()->WriteManifest(m);
    last_complete_ = m;
    last_complete_dir_ = dir;
    out_ << "coordinator: checkpoint " << dir << " (" << CheckpointPosition(m) << ")" << std::endl;
  } catch (const IoError& e) {
    ASGD_LOG(kError, "coordinator: checkpoint failed: ", e.what());
  }
  ckpt_.reset();
}

void Coordinator::RequestEval(bool full) {
  PendingEval p;
  p.id = ++eval_id_;
  p.full = full;
  p.time_s = Elapsed();
  p.samples = Samples();
  p.updates = RecordedUpdates();
  p.train_loss = TakeTrainLoss();
  pending_ = p;
  // The schedule counts from the request (the row's time and samples are the request's):
  // an evaluation that is dropped is not asked for again before the next one is due. The
  // initial one moves only the time mark, as in the in-process runner (a resumed run
  // evaluates again once training started).
  if (phase_ == Phase::kRunning) {
    session_->eval_schedule().Evaluated(p.samples, p.time_s, full);
  } else {
    session_->eval_schedule().SetLastTime(p.time_s);
  }
  family_->Evaluate(full);
}

void Coordinator::Evaluated(const models::EvalResult& r, double consensus_distance) {
  const PendingEval p = *pending_;
  pending_.reset();
  EvalInput in;
  in.samples = p.samples;
  in.updates = p.updates;
  in.train_loss = p.train_loss;
  in.learning_rate = session_->LearningRateAt(p.samples);
  in.consensus = consensus_distance;
  session_->Record(r, in, p.time_s);
  const double epoch =
      static_cast<double>(p.samples) / static_cast<double>(s_.problem.data.train.num_examples);
  ASGD_LOG(kInfo, "epoch ", Fixed(epoch, 2), ", ", p.updates, " updates: test accuracy ",
           Fixed(r.accuracy(), 4), " (", r.count, " examples), loss ", Fixed(r.mean_loss(), 4));
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

void Coordinator::Fail(const std::string& why) {
  if (failure_.empty()) {
    failure_ = why;
    ASGD_LOG(kError, "coordinator: ", why);
  }
  if (phase_ < Phase::kStoppingWorkers) Enter(Phase::kStoppingWorkers);
}

void Coordinator::Enter(Phase p) {
  phase_ = p;
  phase_since_ = Steady::now();
}
bool Coordinator::PhaseOlderThan(milliseconds d) const { return Steady::now() - phase_since_ > d; }

void Coordinator::CheckLiveness() {
  for (auto& [key, role] : roles_) {
    if (!role.registered || role.done || role.dead) continue;
    // The evaluator reports between evaluations only, and reading the centre may take
    // up to cluster.timeout_s when a shard is down.
    const auto patience =
        key.first == "evaluator" ? s_.heartbeat_timeout + s_.timeout : s_.heartbeat_timeout;
    if (Steady::now() - role.last_seen > patience) {
      role.dead = true;
      const std::string what =
          StrCat(Describe(key), " sent nothing for ",
                 std::chrono::duration<double>(s_.heartbeat_timeout).count(), " s");
      const std::string why_not = key.first == "worker" ? WorkerLossFatal() : "";
      const bool training = phase_ == Phase::kRunning || phase_ == Phase::kStoppingWorkers;
      if (key.first == "ps" && phase_ == Phase::kRunning && last_complete_) {
        if (!paused_) pause_since_ = Steady::now();
        paused_ = true;
        ckpt_.reset();  // a checkpoint in progress cannot complete without the shard
        ASGD_LOG(kWarning, "coordinator: ", what,
                 "; workers pause until it is restarted "
                 "(`asgd ps --config C --task ",
                 key.second,
                 "` with the run's cluster) and "
                 "restored from ",
                 last_complete_dir_);
        continue;
      }
      if (key.first == "worker" && why_not.empty() && training) {
        ++lost_workers_;
        ASGD_LOG(kWarning, "coordinator: ", what,
                 "; training goes on without it "
                 "(cluster.on_worker_loss = continue)",
                 s_.problem.plan.strategy->synchronous
                     ? StrCat("; synchronous rounds re-formed with ", LiveWorkers(), " workers")
                     : std::string());
      } else {
        Fail(why_not.empty() ? what : StrCat(what, "; ", why_not));
      }
    }
  }
}

std::string Coordinator::WorkerLossFatal() const {
  if (s_.cluster().fail_on_worker_loss) return StrCat(ClusterPlan::kOnWorkerLossKey, " = fail");
  return family_->WorkerLossFatal();
}

int Coordinator::LiveWorkers() const {
  int alive = 0;
  for (std::size_t v = 0; v < workers_.size(); ++v) alive += WorkerLost(v) ? 0 : 1;
  return alive;
}

bool Coordinator::All(const std::string& kind, bool (*pred)(const Role&)) const {
  for (const auto& [key, role] : roles_) {
    if (key.first == kind && !pred(role)) return false;
  }
  return true;
}
void Coordinator::Tick() {
  CheckLiveness();
  family_->Check();
  switch (phase_) {
    case Phase::kRegistering: {
      bool all = true;
      std::string missing;
      for (const auto& [key, role] : roles_) {
        if (!role.registered) {
          all = false;
          missing += (missing.empty() ? "" : ", ") + Name(key);
        }
      }
      if (all) {
        if (!family_->Start()) return;
        out_ << "coordinator: all " << roles_.size() << " roles registered" << std::endl;
        Enter(Phase::kInitialEval);
        RequestEval(false);
      } else if (PhaseOlderThan(s_.timeout)) {
        Fail("never registered within cluster.timeout_s: " + missing);
        Enter(Phase::kStoppingShards);
      }
      return;
    }
    case Phase::kInitialEval:
      if (!pending_) {
        started_ = true;
        session_->training().Start();
        session_->StartCheckpoints(family_->PushesPerStep());
        start_wall_ = WallSeconds();
        Enter(Phase::kRunning);
      } else if (PhaseOlderThan(s_.timeout)) {
        Fail("the evaluator did not evaluate the initial parameters within cluster.timeout_s");
      }
      return;
    case Phase::kRunning:
      Running();
      return;
    case Phase::kStoppingWorkers:
      // Synchronous strategies: once every worker was told to stop, the shards are
      // closed so that a worker held in a round is let go (kShuttingDown ends its loop).
      if (All("worker", ToldOrFinished))
        close_shards_ = s_.problem.plan.strategy->synchronous || !failure_.empty();
      if (All("worker", Finished)) {
        family_->WorkersFinished();
      } else if (PhaseOlderThan(s_.timeout)) {
        Fail("workers did not stop within cluster.timeout_s");
        Enter(Phase::kStoppingShards);
      }
      return;
    case Phase::kFinalEval:
      if (!pending_) {
        Enter(Phase::kStoppingShards);
      } else if (PhaseOlderThan(s_.timeout)) {
        Fail("the final evaluation did not arrive within cluster.timeout_s");
        Enter(Phase::kStoppingShards);
      }
      return;
    case Phase::kStoppingShards:
      close_shards_ = true;
      if ((All("ps", Finished) && All("evaluator", Finished)) || PhaseOlderThan(s_.timeout)) {
        Enter(Phase::kDone);
      }
      return;
    case Phase::kDone:
      return;
  }
}

void Coordinator::Running() {
  // The reasons and their order are the in-process runners' (StopPolicy).
  const StopPolicy& stop_rules = session_->stop();
  const std::optional<std::string> reason =
      stop_rules.Check(Samples(), Steps(), Elapsed(), session_->recorder().time_to_target_s() >= 0);
  if (paused_ && Steady::now() - pause_since_ > s_.timeout) {
    Fail("a lost shard was not restarted within cluster.timeout_s");
    return;
  }
  if (reason) {
    reason_ = *reason;
    Enter(Phase::kStoppingWorkers);
    return;
  }
  if (family_->WorkersEnded()) {
    reason_ = stop_rules.TargetReason();
    Enter(Phase::kStoppingWorkers);
    return;
  }
  MaybeCheckpoint();
  if (pending_ || paused_) return;  // one evaluation at a time; none without every shard
  if (session_->eval_schedule().Due(family_->ScheduleSamples(Samples()), Elapsed())) {
    RequestEval(false);
  }
}

int Coordinator::Finish() {
  const bool failed = !failure_.empty();
  if (!failed) family_->SaveFinal();
  RunEnd end;
  end.time_s = Elapsed();
  end.samples = Samples();
  end.updates = RecordedUpdates();
  end.reason = failed ? failure_ : reason_;
  end.failed = failed;
  end.device = s_.problem.plan.device;
  std::replace(end.device.begin(), end.device.end(), ',', '+');
  family_->End(end);
  // This run's accounts: the session adds a resumed run's earlier ones.
  std::vector<WorkerMetrics> this_run;
  for (std::size_t w = 0; w < workers_.size(); ++w) this_run.push_back(ThisRun(w));
  if (bad_messages_ > 0) {
    ASGD_LOG(kWarning, "coordinator: refused ", bad_messages_, " malformed messages");
  }
  // No final_model.pt here: the process that evaluates wrote it (SaveFinal).
  const RunResult result =
      session_->Finish(*s_.problem.model, {}, end, std::move(this_run),
                       {{"lost_workers", std::to_string(lost_workers_)},
                        {"rejoined_workers", std::to_string(rejoined_workers_)},
                        {"returned_stragglers", std::to_string(returned_stragglers_)},
                        {"ps_restarts", std::to_string(ps_restarts_)},
                        {"lost_updates", std::to_string(lost_updates_)},
                        {"paused_s", CsvCell(paused_total_s_)}},
                       out_);
  family_->Cleanup();
  return result.exit_status;
}

}  // namespace asgd::experiments::cluster
