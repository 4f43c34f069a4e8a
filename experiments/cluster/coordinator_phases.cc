#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "algorithms/schedule.h"
#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "experiments/cluster/coordinator.h"
#include "experiments/config/exit_status.h"
#include "experiments/run/evaluation.h"
#include "experiments/run/problem.h"

namespace asgd::experiments::cluster {

namespace alg = ::asgd::algorithms;
using ::asgd::internal::StrCat;

// ---- checkpoints (multi-process): the coordinator asks, each ps saves its own file
// into the folder, the coordinator writes the manifest once all have. ----------------
void Coordinator::MaybeCheckpoint() {
  const int64_t every_steps = s_.problem.plan.checkpoint_every_steps;
  const double every_s = s_.problem.plan.checkpoint_every_s;
  if (ckpt_ || paused_ || (every_steps <= 0 && every_s <= 0)) return;
  const int64_t updates = Updates();
  // On a collective every_steps counts rounds, each a push of every rank.
  const int64_t every = every_steps * (collective_ ? s_.problem.plan.workers : 1);
  const bool due = (every_steps > 0 && updates >= last_ckpt_step_ + every) ||
                   (every_s > 0 && Elapsed() - last_ckpt_s_ >= every_s);
  if (!due || updates == last_ckpt_step_) return;
  Checkpoint request;
  request.manifest = ManifestOfRun(s_.problem.plan.strategy->name, s_.problem.plan.config_hash,
                                   resume_ ? resume_->resumes + 1 : 0, *recorder_);
  CheckpointManifest& m = request.manifest;
  // The file holds the rows the manifest names before any shard saves (and so before
  // CompleteCheckpoint writes the manifest).
  staleness_->Flush();
  SetManifestCounters(m, {updates, Steps(), Samples(), Elapsed()}, staleness_.get());
  for (std::size_t w = 0; w < workers_.size(); ++w) m.workers.push_back(Total(w));
  if (collective_) {
    // Named by rounds. Rank 0 takes it at its next vote, and that boundary's rounds name
    // the complete folder (CompleteCollectiveCheckpoint). Until then the folder is named
    // past the newest complete checkpoint: the reports lag the ranks, so updates / N may
    // still be at or below that one's rounds, and rank 0 must not write into it.
    const int64_t after =
        last_complete_ && last_complete_->rounds >= 0 ? last_complete_->rounds + 1 : 0;
    m.rounds = std::max(updates / s_.problem.plan.workers, after);
  }
  request.dir = checkpointer_->Folder(m);
  request.since = Steady::now();
  ckpt_ = std::move(request);
  last_ckpt_step_ = updates;
  last_ckpt_s_ = Elapsed();
}

void Coordinator::CompleteCheckpoint() {
  CheckpointManifest m = ckpt_->manifest;
  m.shards.clear();
  for (const auto& [ps, entry] : ckpt_->saved) m.shards.push_back(entry);
  try {
    const std::string dir = checkpointer_->WriteManifest(m);
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
  if (loss_count_ > 0) p.train_loss = loss_sum_ / static_cast<double>(loss_count_);
  loss_sum_ = 0;
  loss_count_ = 0;
  pending_ = p;
  // The schedule counts from the request (the row's time and samples are the request's):
  // an evaluation that is dropped is not asked for again before the next one is due. The
  // initial one moves only the time mark, as in the in-process runner (a resumed run
  // evaluates again once training started).
  if (phase_ == Phase::kRunning) {
    schedule_.Evaluated(p.samples, p.time_s, full);
  } else {
    schedule_.SetLastTime(p.time_s);
  }
  if (collective_) {
    // Rank 0 answers an evaluation asked for while training (WorkerReply::evaluate). The
    // initial one is of the parameters every rank starts from (rank 0's, broadcast),
    // which every process derives from the seed: evaluated here.
    if (phase_ != Phase::kRunning) {
      if (resume_) {
        pending_.reset();  // a resumed run adds no row at its start (as `asgd run`)
      } else {
        const std::vector<float> initial = s_.Initial();
        const models::EvalResult r =
            EvaluateOn(*s_.problem.model, initial, s_.problem.EvalSet(full), s_.problem.data.train);
        const double best_before = recorder_->best_test_accuracy();
        Evaluated(r, /*consensus_distance=*/0.0);
        SaveBestModel(*s_.problem.model, initial, r.accuracy(), best_before, run_->path());
      }
    }
    return;
  }
  if (!evaluator_process_) {
    try {
      if (auto r = inline_evaluator_->Evaluate(full)) {
        const double best_before = recorder_->best_test_accuracy();
        Evaluated(*r);
        inline_evaluator_->SaveBest(r->accuracy(), best_before, run_->path());
      } else {
        pending_.reset();  // dropped: the next one is asked for as usual
      }
    } catch (const InputError& e) {
      Fail(e.what());
    }
  }
}

void Coordinator::CollectiveEvaluated(const CollectiveEvaluation& e) {
  if (e.full) {
    final_eval_ = e;  // written once every worker ended (kStoppingWorkers)
    return;
  }
  models::EvalResult r;
  r.loss_sum = e.loss_sum;
  r.correct = e.correct;
  r.count = e.count;
  PendingEval p;
  p.id = e.id;
  p.time_s = Elapsed();
  p.samples = e.samples;
  p.updates = e.updates / s_.problem.plan.workers;  // the pushes of every rank: rounds
  if (loss_count_ > 0) p.train_loss = loss_sum_ / static_cast<double>(loss_count_);
  loss_sum_ = 0;
  loss_count_ = 0;
  const bool answers = pending_ && pending_->id == e.id;
  const std::optional<PendingEval> waiting = answers ? std::nullopt : pending_;
  pending_ = p;
  Evaluated(r, e.consensus_distance);
  pending_ = waiting;  // an evaluation by epochs does not answer the one asked for
  if (phase_ == Phase::kRunning) schedule_.Evaluated(e.samples, p.time_s, false);
}

void Coordinator::CompleteCollectiveCheckpoint(const CollectiveSaved& saved) {
  // The boundary's counters, alike on every rank: v steps each, the partitions' samples,
  // rank 0's pushes (every rank pushes alike) on top of a resumed run's.
  const int64_t v = static_cast<int64_t>(saved.shard.version);
  const int64_t n = s_.problem.plan.workers;
  CheckpointManifest& m = ckpt_->manifest;
  const int64_t pushes = (resume_ ? resume_->step : 0) + saved.pushes * n;
  const double time_s = Elapsed();
  // Every worker took v steps: their rows up to v are written now (the reports lag), so
  // that a resume, which keeps the rows of steps <= v, has each of them.
  for (int w = 0; w < s_.problem.plan.workers; ++w) CollectiveStaleness(w, v - first_step_);
  SetManifestCounters(m, {pushes, v * n, plan_->SamplesAtStep(v), time_s}, staleness_.get());
  m.rounds = m.step / n;
  SetManifestAccount(m, *recorder_);  // as of now: rows written since the request
  m.workers.clear();
  for (std::size_t w = 0; w < workers_.size(); ++w) {
    WorkerMetrics x = Total(w);  // times and bytes as last reported
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
  ckpt_->saved[0] = e;
  // The folder was named when asked for; the manifest's rounds are the boundary's, and
  // the folder carries them.
  const std::string dir = checkpointer_->Folder(m);
  if (dir != ckpt_->dir) {
    std::error_code ec;
    std::filesystem::rename(ckpt_->dir, dir, ec);
    if (ec) {
      ASGD_LOG(kError, "coordinator: checkpoint failed: cannot move ", ckpt_->dir, " to ", dir,
               ": ", ec.message());
      ckpt_.reset();
      return;
    }
    ckpt_->dir = dir;
  }
  CompleteCheckpoint();
}

void Coordinator::CollectiveStaleness(int worker, int64_t steps) {
  // steps: this run's own (a resumed run's workers count from its checkpoint's boundary).
  int64_t& recorded = staleness_steps_[static_cast<std::size_t>(worker)];
  for (; recorded < steps; ++recorded) {
    ps::StalenessRecord rec;
    rec.worker = static_cast<uint32_t>(worker);
    rec.step = first_step_ + recorded + 1;
    rec.pulled_version = static_cast<uint64_t>(first_step_ + recorded);
    rec.applied_version = rec.pulled_version;
    rec.wall_time_s = Elapsed();
    staleness_->Record(rec);
  }
  staleness_->Flush();
}

void Coordinator::CheckCollectiveFailure() {
  if (collective_failures_.empty() || !failure_.empty()) return;
  // A live process reports every cluster.report_interval_s (its reporter thread, even
  // while its training thread waits in a collective call); quiet for three of them is
  // a process that died or stopped.
  const auto quiet = std::max<milliseconds>(3 * s_.report_interval, milliseconds(500));
  std::string silent;
  std::vector<Role*> lost;
  for (auto& [key, role] : roles_) {
    if (key.first != "worker" || role.done) continue;
    if (!role.dead && Steady::now() - role.last_seen <= quiet) return;  // it may still fail
    silent += (silent.empty() ? "" : ", ") + Describe(key);
    lost.push_back(&role);
  }
  const std::string& first = collective_failures_.front().second;
  if (!silent.empty()) {
    for (Role* role : lost) role->dead = true;  // not waited for
    Fail(StrCat(silent,
                " left the collective (it died or stopped answering): a collective "
                "cannot lose a member; ",
                first));
    return;
  }
  // Every rank ended: the one whose failure is not the collective's (a NaN loss) caused it.
  for (const auto& [w, why] : collective_failures_) {
    if (why.find("collective: rank") == std::string::npos) {
      Fail(why);
      return;
    }
  }
  Fail(first);
}

void Coordinator::Evaluated(const models::EvalResult& r, double consensus_distance) {
  const PendingEval p = *pending_;
  pending_.reset();
  const double epoch =
      static_cast<double>(p.samples) / static_cast<double>(s_.problem.data.train.num_examples);
  const double learning_rate = s_.problem.plan.learning_rate *
                               alg::LearningRateScale(s_.problem.schedule, epoch);
  ConvergenceRow row =
      MakeConvergenceRow({p.time_s, p.samples, p.updates, p.train_loss, learning_rate}, r,
                         s_.problem.data.train.num_examples);
  row.consensus_distance = consensus_distance;
  recorder_->Convergence(row);
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
  if (collective_) return "a collective cannot lose a member";
  if (!s_.problem.plan.strategy->synchronous) return "";
  if (LiveWorkers() == 0) return "no worker is left";
  // The rounds of sync_sgd, sagn, easgd and model_averaging are re-formed with the
  // survivors (the shards hear of it in their next report: SetLiveWorkers); SSP's clock
  // table would wait for the lost worker's clock forever.
  if (s_.problem.plan.strategy->clocks) {
    return "ssp waits for every worker's clock (re-forming SSP without a worker is not "
           "supported)";
  }
  return "";
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
  if (collective_) CheckCollectiveFailure();
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
        if (!evaluator_process_ && !collective_) {
          inline_evaluator_ = std::make_unique<CentreEvaluator>(context_, s_);
          const ps::Status st = inline_evaluator_->WaitForServers();
          if (!st.ok()) {
            Fail("coordinator: the shard servers: " + st.ToString());
            return;
          }
        }
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
        training_.emplace(clock_.get(), time_base_);
        training_->Start();
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
      if (All("worker", Finished) && collective_) {
        if (!failure_.empty()) {
          Enter(Phase::kStoppingShards);
        } else if (!collective_failures_.empty()) {
          return;  // CheckCollectiveFailure decides
        } else if (!final_eval_) {
          Fail("worker 0 ended without the final evaluation of the workers' average");
          Enter(Phase::kStoppingShards);
        } else {
          // The parameters the ranks stopped at: the row's samples and updates are theirs.
          CollectiveEvaluation last = *final_eval_;
          last.full = false;  // written now
          CollectiveEvaluated(last);
          Enter(Phase::kStoppingShards);
        }
      } else if (All("worker", Finished)) {
        if (failure_.empty()) {
          Enter(Phase::kFinalEval);
          RequestEval(true);
        } else {
          Enter(Phase::kStoppingShards);
        }
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
  const std::optional<std::string> reason =
      stop_.Check(Samples(), Steps(), Elapsed(), recorder_->time_to_target_s() >= 0);
  if (paused_ && Steady::now() - pause_since_ > s_.timeout) {
    Fail("a lost shard was not restarted within cluster.timeout_s");
    return;
  }
  if (reason) {
    reason_ = *reason;
    Enter(Phase::kStoppingWorkers);
    return;
  }
  if (collective_ && All("worker", Finished)) {
    // The ranks stopped together at their limit (they decide epochs and max_steps
    // themselves, from their step count).
    reason_ = stop_.TargetReason();
    Enter(Phase::kStoppingWorkers);
    return;
  }
  MaybeCheckpoint();
  if (pending_ || paused_) return;  // one evaluation at a time; none without every shard
  // A collective's ranks hold themselves at the evaluations by epochs: here by seconds.
  if (schedule_.Due(collective_ ? 0 : Samples(), Elapsed())) RequestEval(false);
}

int Coordinator::Finish() {
  const bool failed = !failure_.empty();
  if (!failed && inline_evaluator_) inline_evaluator_->SaveFinal(run_->path());
  RunEnd end;
  end.algorithm = s_.problem.plan.name;
  end.model = s_.problem.plan.model_name;
  end.dataset = s_.problem.plan.dataset;
  end.workers = s_.problem.plan.workers;
  end.seed = static_cast<int64_t>(s_.problem.plan.seed);
  end.compression =
      s_.problem.plan.compression.name +
      (s_.problem.plan.compression.name != "none" && s_.problem.plan.compression.error_feedback
           ? "+ef"
           : "");
  end.epochs = Epochs();
  end.time_s = Elapsed();
  end.samples = Samples();
  end.updates = RecordedUpdates();
  end.reason = failed ? failure_ : reason_;
  end.failed = failed;
  end.device = s_.config.String("model.device");
  std::replace(end.device.begin(), end.device.end(), ',', '+');
  end.ps_shards = collective_ ? 0 : s_.spec.num_ps();
  const std::string ps0 = s_.spec.PsAddress(0);
  end.transport = collective_ ? StrCat("gloo-", s_.config.String("collective.algorithm"))
                              : ps0.substr(0, ps0.find(':'));
  if (collective_) {
    end.updates_word = "communication rounds";
    end.staleness_word = "worker steps";
  }
  std::vector<WorkerMetrics> totals;
  for (std::size_t w = 0; w < workers_.size(); ++w) totals.push_back(Total(w));
  if (bad_messages_ > 0) {
    ASGD_LOG(kWarning, "coordinator: refused ", bad_messages_, " malformed messages");
  }
  EndRun(*run_, *recorder_, staleness_.get(), end, totals,
         {{"lost_workers", std::to_string(lost_workers_)},
          {"rejoined_workers", std::to_string(rejoined_workers_)},
          {"returned_stragglers", std::to_string(returned_stragglers_)},
          {"ps_restarts", std::to_string(ps_restarts_)},
          {"lost_updates", std::to_string(lost_updates_)},
          {"paused_s", CsvCell(paused_total_s_)}},
         out_);
  if (!collective_dir_.empty()) {
    // The ranks' file store is of no use once they ended.
    std::error_code ec;
    std::filesystem::remove_all(collective_dir_, ec);
  }
  return failed ? kExitBadInput : kExitOk;
}

}  // namespace asgd::experiments::cluster
