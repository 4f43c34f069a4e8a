// The coordinator of a multi-process training run (cluster_run.h says what it does).
// Internal to experiments/: RunCoordinatorRole's state machine, its methods spread over
//   coordinator.cc         the run folder (new or resumed), the main loop, and the
//                          answers to the roles' messages (registration, reports);
//   coordinator_phases.cc  the phases (Tick, Running: when to stop, when to evaluate),
//                          checkpoints, liveness, evaluations (the convergence rows,
//                          Evaluated) and the end of the run (Finish: the summary).
#pragma once

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "experiments/cluster/cluster_common.h"
#include "experiments/cluster/control_protocol.h"
#include "experiments/config/signals.h"
#include "experiments/record/checkpoint.h"
#include "experiments/record/metrics.h"
#include "experiments/record/run_core.h"
#include "experiments/record/run_dir.h"
#include "experiments/record/run_end.h"
#include "experiments/run/collective_rank.h"

namespace asgd::experiments::cluster {

class Coordinator {
 public:
  // Throws ConfigError (the experiment.* stop keys, as the in-process runners do).
  Coordinator(Setup& setup, const RoleRequest& request, std::ostream& out)
      : s_(setup),
        request_(request),
        out_(out),
        stop_(StopPolicy::FromConfig(setup.config, setup.problem.data.train.num_examples)),
        schedule_(EvalSchedule::FromConfig(setup.config, setup.problem.data.train.num_examples)),
        collective_(setup.problem.plan.family == algorithms::Family::kGroup) {}
  // Runs until the run ended; returns the exit status (0 completed, 2 failed).
  int Run();

 private:
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
  using Key = std::pair<std::string, int>;
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
  void OpenRunDir();  // new, or resumed from request_.resume_dir's newest checkpoint
  static std::string Name(const Key& k);
  std::string Describe(const Key& k) const;
  // Training time (TrainingClock's rule): this coordinator's since the workers started,
  // plus a resumed run's before its checkpoint. Workers are not held for evaluations.
  double Elapsed() const;
  // Worker w's account over all its processes: those that were lost and replaced by a
  // restarted worker (retired_) and the current one.
  WorkerMetrics Total(std::size_t w) const;
  int64_t Samples() const;
  int64_t Updates() const;
  // What the updates columns and the final line count: Updates(), or for a strategy on a
  // collective its communication rounds (every rank pushes once in each: Updates() / N).
  int64_t RecordedUpdates() const;
  int64_t Steps() const;
  bool WorkerLost(std::size_t w) const;
  // lockstep_rounds_ (below) from the config and the partitions; 0 for other strategies.
  int64_t LockstepRounds() const;
  double Epochs() const;
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

  // A strategy on a collective (collective_worker_role.cc): rank 0's evaluation of the
  // workers' average; the final one (full) is kept for the end of the run.
  void CollectiveEvaluated(const CollectiveEvaluation& e);
  // Rank 0 wrote the checkpoint asked for: the manifest's counters are the boundary's.
  void CompleteCollectiveCheckpoint(const CollectiveSaved& saved);
  // One staleness-0 row per worker step (no update on a collective is stale).
  void CollectiveStaleness(int worker, int64_t steps);
  // Once a rank failed: when every worker has either ended or gone quiet, fails the run
  // with one line naming the quiet ones (a collective cannot lose a member), or the
  // failure that is not the collective's own (a NaN loss).
  void CheckCollectiveFailure();

  // ---- coordinator_phases.cc ----
  void MaybeCheckpoint();
  void CompleteCheckpoint();
  // Asks for an evaluation now (the evaluator's next report takes it), or does it here;
  // the schedule counts from it.
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
  // The running phase: stops (stop_), checkpoints, schedules evaluations (schedule_).
  void Running();
  // Writes workers.csv, staleness_histogram.csv, summary.csv and the run's status
  // (RunRecorder::Finish, with the coordinator's own provenance fields).
  int Finish();

  Setup& s_;
  const RoleRequest& request_;
  std::ostream& out_;
  const StopPolicy stop_;
  EvalSchedule schedule_;
  std::shared_ptr<transport::Context> context_;
  std::unique_ptr<transport::ControlServer> server_;
  std::unique_ptr<RunDir> run_;
  std::unique_ptr<RunRecorder> recorder_;  // convergence.csv and the accuracy account
  std::unique_ptr<std::ostream> staleness_file_;
  std::unique_ptr<StalenessRecorder> staleness_;  // buffered: flushed after each ps report
  std::unique_ptr<CentreEvaluator> inline_evaluator_;
  std::map<Key, Role> roles_;
  std::vector<WorkerMetrics> workers_;
  std::vector<WorkerMetrics> retired_;  // per worker: its lost processes' account
  int lost_workers_ = 0, rejoined_workers_ = 0, returned_stragglers_ = 0;
  // Checkpoints and lost shards.
  std::unique_ptr<Checkpointer> checkpointer_;
  std::optional<CheckpointManifest> resume_;  // the checkpoint a resumed run started from
  double time_base_ = 0;
  std::optional<Checkpoint> ckpt_;
  std::optional<CheckpointManifest> last_complete_;
  std::string last_complete_dir_;
  int64_t last_ckpt_step_ = 0;
  double last_ckpt_s_ = 0;
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
  bool evaluator_process_ = false;
  Phase phase_ = Phase::kRegistering;
  Steady::time_point phase_since_;
  bool started_ = false;
  std::unique_ptr<Clock> clock_ = NewSystemClock();
  std::optional<TrainingClock> training_;  // from the start of training
  double start_wall_ = 0;
  double loss_sum_ = 0;
  int64_t loss_count_ = 0;
  std::optional<PendingEval> pending_;
  int64_t eval_id_ = 0;
  bool close_shards_ = false;
  std::string failure_, reason_;
  int64_t bad_messages_ = 0;
  // A strategy on a collective: no shards, no evaluator; the workers meet in
  // collective_dir_ (a folder of the run) and rank 0 evaluates.
  const bool collective_;
  std::string collective_dir_;
  std::vector<std::pair<int, std::string>> collective_failures_;  // in arrival order
  std::optional<CollectiveEvaluation> final_eval_;
  std::vector<int64_t> staleness_steps_;  // per worker: steps with a staleness row
  std::optional<CollectivePlan> plan_;    // the ranks' plan (samples at a step)
  int64_t first_step_ = 0;                // a resumed run's: its checkpoint's boundary
};

// A number with a fixed count of decimals, for the run's log lines.
std::string Fixed(double v, int digits);

}  // namespace asgd::experiments::cluster
