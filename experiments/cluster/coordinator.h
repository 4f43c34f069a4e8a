// The coordinator of a multi-process training run (cluster_run.h says what it does).
// Internal to experiments/: RunCoordinatorRole's state machine. The life of the run
// (the run folder, new or resumed, the records, the training clock, the stop rules, the
// evaluation schedule, checkpoints' folders and manifests, the end of the run) is the
// RunSession's (experiments/run/run_session.h), as for the in-process drivers; the
// coordinator adds what it learns from the roles' reports: the workers' counters, their
// liveness, the budgets it grants. What the strategy's family changes is one object,
// chosen once (CoordinatorFamily::For):
//   coordinator.cc             the main loop, the session, the answers to the roles'
//                              messages (registration, reports);
//   coordinator_phases.cc      the phases (Tick, Running: when to stop, when to evaluate),
//                              checkpoints, liveness, evaluations (Evaluated) and Finish;
//   coordinator_store.cc       StoreFamily: the shard servers, the evaluator (or the
//                              coordinator's own evaluation of the centre), lockstep rounds;
//   coordinator_group.cc       GroupFamily: the ranks of a collective, their file store,
//                              rank 0's evaluations and checkpoints, a lost member.
#pragma once

#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "experiments/cluster/cluster_common.h"
#include "experiments/cluster/control_protocol.h"
#include "experiments/config/signals.h"
#include "experiments/record/checkpoint.h"
#include "experiments/record/metrics.h"
#include "experiments/record/run_end.h"
#include "experiments/run/run_session.h"

namespace asgd::experiments::cluster {

class Coordinator;

// What a strategy's family (algorithms::Family) changes in the coordinator: the roles it
// waits for, what a worker's report carries, who evaluates, how checkpoints are taken and
// named, when losing a worker ends the run. StoreFamily (the parameter server) and
// GroupFamily (a collective); each reaches the coordinator's state through `c`.
class CoordinatorFamily {
 public:
  using Key = std::pair<std::string, int>;
  // The object of the plan's family (kStore or kGroup; never kSequential, refused by
  // MakeSetup).
  static std::unique_ptr<CoordinatorFamily> For(Coordinator& c);
  virtual ~CoordinatorFamily() = default;

  // The roles it waits for besides the workers (Coordinator::roles_), and its own setup.
  virtual void Expect() = 0;
  // The run folder is open (new or resumed: the session's checkpoint is verified).
  virtual void Opened() = 0;
  // The run's shape for the first line ("2 shards, an evaluator", "on gloo (ring)").
  virtual std::string Shape() const = 0;
  // The SessionOptions::checkpoint_shards of a resumed run.
  virtual int CheckpointShards() const = 0;
  // Pushes of one step of experiment.checkpoint_every_steps (a collective: every rank's).
  virtual int64_t PushesPerStep() const = 0;
  // What the updates columns and the final line count from the workers' pushes.
  virtual int64_t Recorded(int64_t pushes) const = 0;
  // The rounds every worker takes, when fixed in advance (Coordinator::lockstep_rounds_;
  // after Opened).
  virtual int64_t LockstepRounds() const { return 0; }
  // A role registered (its first time, or a restart: `restarted`): what the reply adds.
  virtual void Registered(const Key& key, bool restarted, RegisterReply& reply) = 0;
  // A worker's report, before its grant; its failure, when it ended with one.
  virtual void WorkerReported(const WorkerReport& m) = 0;
  virtual void WorkerFailed(int w, const std::string& why) = 0;
  // What a worker's reply adds (orders to evaluate or checkpoint at a boundary).
  virtual void FillReply(int w, WorkerReply& reply) = 0;
  // A checkpoint is asked for: names it further (a collective's rounds).
  virtual void NameCheckpoint(CheckpointManifest& m, int64_t pushes) const = 0;
  // An evaluation was asked for (Coordinator::pending_): does it here, or leaves it for
  // the role that evaluates.
  virtual void Evaluate(bool full) = 0;
  // Every role registered: prepares training; false when it failed (Fail was called).
  virtual bool Start() = 0;
  // Every tick (a collective's lost member).
  virtual void Check() {}
  // Running: the workers stopped on their own (a collective's ranks at their limit).
  virtual bool WorkersEnded() const { return false; }
  // The samples the evaluation schedule counts (a collective's ranks hold themselves at
  // the evaluations by epochs: 0, by seconds only here).
  virtual int64_t ScheduleSamples(int64_t samples) const { return samples; }
  // Stopping the workers, every one finished: the next phase.
  virtual void WorkersFinished() = 0;
  // Why losing a worker ends the run ("": it goes on without it), past cluster.on_worker_loss.
  virtual std::string WorkerLossFatal() const = 0;
  // The run's last line and summary: its family's fields.
  virtual void End(RunEnd& end) const = 0;
  // After the summary (a collective: its file store removed); before it, in a run that
  // did not fail, the final model (the coordinator's own evaluation of the centre).
  virtual void SaveFinal() {}
  virtual void Cleanup() {}
};

class Coordinator {
 public:
  // Throws ConfigError (the experiment.* stop keys, as the in-process runners do).
  Coordinator(Setup& setup, const RoleRequest& request, std::ostream& out);
  ~Coordinator();
  // Runs until the run ended; returns the exit status (0 completed, 2 failed).
  int Run();

 private:
  friend class CoordinatorFamily;
  friend class StoreFamily;
  friend class GroupFamily;
  enum class Phase {
    kRegistering,
    kInitialEval,
    kRunning,
    kStoppingWorkers,
    kFinalEval,
    kStoppingShards,
    kDone
  };
  struct Role {
    bool registered = false;
    bool done = false;
    bool dead = false;
    bool told_to_stop = false;
    int64_t pid = 0;
    std::string host;
    Steady::time_point last_seen;
  };
  using Key = CoordinatorFamily::Key;
  struct PendingEval {
    int64_t id = 0;
    bool full = false;
    bool sent = false;
    double time_s = 0;
    int64_t samples = 0, updates = 0;
    double train_loss = std::nan("");
  };
  struct Checkpoint {
    CheckpointManifest manifest;  // the counters when it was asked for
    std::string dir;
    std::map<int, CheckpointManifest::Shard> saved;  // by ps
    Steady::time_point since;
  };

  // ---- coordinator.cc ----
  void Expect();
  void OpenSession();  // the run folder: new, or resumed from request_.resume_dir
  static std::string Name(const Key& k);
  std::string Describe(const Key& k) const;
  // Training time (the session's TrainingClock): since the workers started, plus a
  // resumed run's before its checkpoint. Workers are not held for evaluations.
  double Elapsed() const { return session_->Seconds(); }
  // A resumed run's account of worker w before its checkpoint (empty in a new run).
  WorkerMetrics Earlier(std::size_t w) const;
  // Worker w's account over this run's processes: those that were lost and replaced by a
  // restarted worker (retired_) and the current one.
  WorkerMetrics ThisRun(std::size_t w) const;
  // Over the whole run: ThisRun and Earlier. Budgets and counters count these.
  WorkerMetrics Total(std::size_t w) const;
  // What worker w's current process did not do itself (the grants are in its own count).
  WorkerMetrics Before(std::size_t w) const;
  int64_t Samples() const;
  int64_t Updates() const;
  // What the updates columns and the final line count (CoordinatorFamily::Recorded).
  int64_t RecordedUpdates() const;
  int64_t Steps() const;
  bool WorkerLost(std::size_t w) const;
  // The checkpoint a resumed run continues (null in a new run).
  const CheckpointManifest* Resumed() const;
  // Takes the workers' mean training loss since the last evaluation (NaN: none).
  double TakeTrainLoss();
  void Handle(const transport::ControlServer::Request& req);
  Role& Find(const Key& key);
  // A report's role: registered (else InputError), seen now; a silent worker is back.
  Role& Reporting(const Key& key);
  std::string Answer(const RegisterRequest& m);
  std::string Answer(const WorkerReport& m);
  std::string Answer(const PsReport& m);
  std::string Answer(const EvaluatorReport& m);
  // The order for an evaluation: with the run's best so far when the evaluating role
  // writes best_model.pt (the model can save itself).
  EvalOrder Order(const PendingEval& p) const;

  // ---- coordinator_phases.cc ----
  void MaybeCheckpoint();
  // Writes the manifest of the checkpoint every snapshot of which was saved.
  void CompleteCheckpoint();
  // Asks for an evaluation now (the family does it here or leaves it for the role that
  // evaluates); the schedule counts from it.
  void RequestEval(bool full);
  // Writes the convergence row of the pending evaluation.
  // consensus_distance: a collective's (NaN: not measured).
  void Evaluated(const models::EvalResult& r, double consensus_distance = std::nan(""));
  void Fail(const std::string& why);
  void Enter(Phase p);
  bool PhaseOlderThan(milliseconds d) const;
  void CheckLiveness();
  // Why losing a worker now ends the run; "" if the run can go on without it.
  std::string WorkerLossFatal() const;
  int LiveWorkers() const;
  bool All(const std::string& kind, bool (*pred)(const Role&)) const;
  // A role that never registered is not waited for.
  static bool Finished(const Role& r) { return r.done || r.dead || !r.registered; }
  static bool ToldOrFinished(const Role& r) { return r.told_to_stop || r.done || r.dead; }
  static bool Alive(const Role& r) { return r.registered && !r.dead; }
  void Tick();
  // The running phase: stops (the session's StopPolicy), checkpoints, schedules
  // evaluations (its EvalSchedule).
  void Running();
  // Writes workers.csv, staleness_histogram.csv, summary.csv and the run's status
  // (RunSession::Finish, with the coordinator's own fields); returns the exit status.
  int Finish();

  Setup& s_;
  const RoleRequest& request_;
  std::ostream& out_;
  std::unique_ptr<CoordinatorFamily> family_;
  std::shared_ptr<transport::Context> context_;
  std::unique_ptr<transport::ControlServer> server_;
  std::unique_ptr<Clock> clock_ = NewSystemClock();  // the session's training clock's
  std::unique_ptr<RunSession> session_;
  std::map<Key, Role> roles_;
  std::vector<WorkerMetrics> workers_;
  std::vector<WorkerMetrics> retired_;  // per worker: this run's lost processes' account
  int lost_workers_ = 0, rejoined_workers_ = 0, returned_stragglers_ = 0;
  // Checkpoints and lost shards.
  std::optional<Checkpoint> ckpt_;
  std::optional<CheckpointManifest> last_complete_;
  std::string last_complete_dir_;
  int64_t last_ckpt_step_ = 0;           // the updates when the last one was asked for
  std::map<int, uint64_t> ps_versions_;  // as each ps last reported
  bool paused_ = false;
  Steady::time_point pause_since_;
  double paused_total_s_ = 0;
  int ps_restarts_ = 0;
  int64_t lost_updates_ = 0;
  std::vector<int64_t> sample_budgets_, step_budgets_;  // granted to each worker so far
  // Strategies whose every round takes one push of every worker (sync_sgd and sagn with
  // replicas_to_aggregate = workers): the rounds the run takes, as the in-process runner
  // takes them (the first r whose samples reach the epochs, or whose steps reach
  // max_steps); each worker is granted exactly these steps, so where the run ends does
  // not depend on when the workers report. 0: other strategies (budgets by shares).
  int64_t lockstep_rounds_ = 0;
  Phase phase_ = Phase::kRegistering;
  Steady::time_point phase_since_;
  bool started_ = false;
  double start_wall_ = 0;
  double loss_sum_ = 0;
  int64_t loss_count_ = 0;
  std::optional<PendingEval> pending_;
  int64_t eval_id_ = 0;
  bool close_shards_ = false;
  std::string failure_, reason_;
  int64_t bad_messages_ = 0;
};

// The two families (coordinator_store.cc, coordinator_group.cc); CoordinatorFamily::For
// picks one.
std::unique_ptr<CoordinatorFamily> NewStoreFamily(Coordinator& c);
std::unique_ptr<CoordinatorFamily> NewGroupFamily(Coordinator& c);

// A number with a fixed count of decimals, for the run's log lines.
std::string Fixed(double v, int digits);

// What one of a worker's peers did and holds, in samples or steps (GrantBudget).
struct PeerBudget {
  int64_t done = 0;
  int64_t granted = 0;  // its budget as last granted (at least done while it works)
  bool lost = false;    // gone: its unused grant goes back to the others
};

// The budget a worker that has done `own` of a run of `total` is granted beside its peers
// (in the same unit): `own` plus a share of what no worker has done or been granted yet,
// split among the live workers and at least `batch` while anything is left, so the run
// ends within about a batch per worker of its total however fast the workers run between
// reports. While the run has not done its total, a worker whose peers hold every grant
// still gets `batch`: a peer may be unable to use its grant until this worker steps (ssp
// holds a worker that is ahead until the slowest catches up; a synchronous round with a
// backup worker waits for the others' pushes), and granting nothing would leave them
// waiting on each other. Paused (a shard restarting): `own`, nothing more.
int64_t GrantBudget(double total, int64_t own, const std::vector<PeerBudget>& peers, int64_t batch,
                    bool paused);

}  // namespace asgd::experiments::cluster
