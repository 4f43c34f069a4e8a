// The run session: the life of one run that every driver shares (sequential `runner.cc`,
// the threads and simulator drivers `threads_driver.cc` and `sim_driver.cc`, and the
// multi-process coordinator). A driver keeps only how its workers run; the session
// does the rest, in one place:
//
//   the run folder     created, or resumed from its newest checkpoint (verified first, the
//                      CSVs truncated to the rows it names, the staleness counts restored)
//   the records        RunRecorder (convergence.csv and the account), StalenessRecorder
//                      (staleness.csv), Progress (the live line)
//   the clock          TrainingClock on the driver's clock (wall, or the simulator's
//                      virtual one), with a resumed run's time before it
//   the counters       samples, worker steps, pushes, the training loss since the last
//                      row, the first failure, the stop flag (RunCounters, thread-safe)
//   evaluation         one row: the centre's test result, best_model.pt, the progress line
//   checkpoints        when one is due (by pushes or by training seconds), its manifest,
//                      and saving it without stopping the run if the disk fails
//   finishing          workers.csv, staleness_histogram.csv, summary.csv, provenance.json,
//                      final_model.pt and the run's last lines
//
// The multi-process coordinator (experiments/cluster/coordinator.h) shares the session
// too. Its workers run in other processes, so it keeps its own counters from their
// reports and does not use RunCounters: it passes them in EvalInput and the checkpoint
// calls, records evaluations made elsewhere (Record), writes the checkpoint manifest
// after its shards saved themselves (checkpointer()), and saves no model at Finish (the
// evaluating process did). SessionOptions says what differs when it resumes.
//
// Thread safety: RunCounters is thread-safe (workers update it); everything else belongs
// to the driver's evaluating thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "core/clock.h"
#include "experiments/config/config.h"
#include "experiments/record/checkpoint.h"
#include "experiments/record/metrics.h"
#include "experiments/record/progress.h"
#include "experiments/record/run_core.h"
#include "experiments/record/run_dir.h"
#include "experiments/record/run_end.h"
#include "experiments/run/problem.h"
#include "experiments/run/runner.h"
#include "ps/shard_core.h"

namespace asgd::experiments {

// What the workers have done, shared by the workers and the evaluating thread.
struct RunCounters {
  std::atomic<int64_t> samples{0};
  std::atomic<int64_t> steps{0};   // worker steps (mini-batch gradients), summed
  std::atomic<int64_t> pushes{0};  // pushes to the store (or a collective's, summed)
  std::atomic<bool> stop{false};   // the run is over: workers start no further step

  // A worker's step of `batch` examples, with its loss, steps and pushes.
  void AddStep(int64_t batch, int64_t local_steps, int64_t step_pushes, float loss);
  // The mean training loss since the last call (NaN: none), and a fresh start.
  double TakeMeanLoss();
  // Records the first failure and raises stop.
  void Fail(const std::string& why);
  std::string failure() const;

 private:
  mutable std::mutex mu_;
  double loss_sum_ = 0;  // guarded by mu_
  int64_t loss_count_ = 0;
  std::string failure_;
};

// How a session is set up by its driver.
struct SessionOptions {
  // The run's clock (not owned; outlives the session): the system clock, or the
  // simulator's virtual clock.
  const Clock* clock = nullptr;
  // Writes staleness.csv and staleness_histogram.csv (every distributed driver; the
  // sequential baseline has no staleness).
  bool staleness = true;
  // Writes convergence.csv's ef_residual_norm column when the plan compresses with error
  // feedback. Off where the residuals live in other processes (the coordinator).
  bool ef_residual = true;
  // The snapshots a resumed checkpoint must hold; 0: the plan's checkpoint_shards() (the
  // coordinator: one per shard server of its cluster).
  int checkpoint_shards = 0;
  // A resumed checkpoint whose shards saved themselves a little after it was asked for
  // (the coordinator's shard servers): staleness.csv keeps exactly the rows of the pushes
  // the saved shards hold (while every push has a row: below metrics.staleness_rows),
  // and for an asynchronous store strategy each worker's resumed pushes are those rows
  // over the shards. false: the rows the manifest counted (a checkpoint of one instant).
  bool staleness_of_saved_shards = false;
};

// One evaluation's inputs besides the parameters.
struct EvalInput {
  int64_t samples = 0;
  int64_t updates = 0;  // convergence.csv's updates column
  double train_loss = std::numeric_limits<double>::quiet_NaN();
  double learning_rate = 0;
  double consensus = std::numeric_limits<double>::quiet_NaN();  // collectives
  std::optional<double> ef_residual_norm;                       // with error feedback
};

class RunSession {
 public:
  // Creates the run folder, or resumes request.resume_dir: its newest checkpoint of this
  // config (TrainingConfigHash) holding problem.plan.checkpoint_shards() snapshots, checked
  // before anything is touched. Throws ConfigError, DataError (a checkpoint that does not
  // fit), IoError.
  RunSession(const Config& config, const RunRequest& request, const Problem& problem,
             const SessionOptions& options);
  ~RunSession();

  const RunDir& run() const { return run_; }
  const std::string& path() const;
  bool resuming() const { return resuming_; }
  // The checkpoint a resumed run continues (empty otherwise).
  const LoadedCheckpoint& resume() const { return resume_; }
  // The seed of the workers' batches: the run's, or a fresh one for each resume (a
  // resumed run draws fresh batches, not a replay of those before its checkpoint).
  uint64_t WorkerSeed() const;

  RunRecorder& recorder() { return *records_.recorder; }
  StalenessRecorder* staleness() { return records_.staleness.get(); }
  TrainingClock& training() { return training_; }
  double Seconds() const { return training_.Seconds(); }
  const StopPolicy& stop() const { return stop_; }
  EvalSchedule& eval_schedule() { return eval_schedule_; }
  Progress& progress() { return progress_; }
  RunCounters& counters() { return counters_; }

  // The schedule's factor at `samples` (algorithms/schedule.h), and the learning rate
  // there (the base rate times it).
  double LearningRateScaleAt(int64_t samples) const;
  double LearningRateAt(int64_t samples) const;
  // Whether a store worker may take its next step by the run's epoch and step limits
  // (StopPolicy::WorkMayContinue on the counters), and then *lr_scale, the schedule's
  // factor at the run's samples. Any thread (Pace::MayStep of the in-process executors).
  bool WorkerMayStep(double* lr_scale) const;

  // Evaluates params (scheduled: the schedule's test examples; full: all), writes the
  // convergence row at training time `time_s`, writes best_model.pt when it is the best so
  // far, and updates the progress line. Returns true when this row first reached the
  // target accuracy. The driver tells the schedule (EvalSchedule::Evaluated) if it should.
  bool Evaluate(models::Model& model, std::span<const float> params, const EvalInput& in,
                double time_s, bool full);
  // Writes the convergence row of an evaluation made elsewhere (by an evaluator process,
  // or a collective's rank 0: r), at training time `time_s`, and updates the progress
  // line; no best_model.pt (the evaluating process writes it). Returns true when this row
  // first reached the target accuracy.
  bool Record(const models::EvalResult& r, const EvalInput& in, double time_s);
  // The inputs of an evaluation from the run's counters, at `samples` (read when the
  // evaluation began): the pushes, the mean training loss since the last row (taken), and
  // the learning rate at those samples.
  EvalInput CountersAt(int64_t samples);
  // Evaluate at the training time now with CountersAt(the samples now).
  bool EvaluateNow(models::Model& model, std::span<const float> params, bool full);

  // Checkpoints (in a run with experiment.checkpoint_every_steps or _s). Start: the
  // workers begin now, at the counters' pushes; a step of experiment.checkpoint_every_steps
  // is `pushes_per_step` pushes (1; a collective's round: every worker's push). Due by
  // pushes (any thread) or by training seconds (the evaluating thread). Saved: the marks
  // move past `pushes` and now.
  void StartCheckpoints(int64_t pushes_per_step = 1);
  bool CheckpointDueByPushes(int64_t pushes) const;
  bool CheckpointDueBySeconds() const;
  bool CheckpointDue(int64_t pushes) const {
    return CheckpointDueByPushes(pushes) || CheckpointDueBySeconds();
  }
  void CheckpointSaved(int64_t pushes);
  // A manifest with the run's account (recorder) and resumes filled in.
  CheckpointManifest NewManifest() const;
  // Adds a resumed run's earlier per-worker metrics to `workers` (in place).
  void AddEarlierWorkerMetrics(std::vector<WorkerMetrics>& workers) const;
  // Writes the checkpoint (a resumed run's earlier worker metrics added to the
  // manifest's); a disk failure is logged and the run goes on (the earlier checkpoints
  // are intact).
  void SaveCheckpoint(CheckpointManifest manifest, const std::vector<ps::ShardSnapshot>& shards);
  // The run's checkpointer, for a driver whose snapshots are saved by other processes
  // (names the folder, writes the manifest); null in a run that does not checkpoint.
  Checkpointer* checkpointer() { return checkpointer_.get(); }

  // The end of the run, after its workers stopped and its last evaluation: final_model.pt
  // (not for a failed run; not when final_params is empty: the process that holds the
  // parameters wrote it), then EndRun (run_end.h) with what ran filled in from the plan
  // and the workers' metrics (a resumed run's earlier ones added); returns the RunResult.
  // Throws IoError.
  RunResult Finish(const models::Model& model, std::span<const float> final_params,
                   const RunEnd& end, std::vector<WorkerMetrics> workers,
                   const std::map<std::string, std::string>& more, std::ostream& out);

 private:
  const Problem& problem_;
  bool resuming_;
  // Checked before the folder is touched: the checkpoint, the stop rules, the schedule.
  LoadedCheckpoint resume_;
  StopPolicy stop_;
  EvalSchedule eval_schedule_;
  RunDir run_;
  RunRecords records_;
  TrainingClock training_;
  Progress progress_;
  RunCounters counters_;
  std::unique_ptr<Checkpointer> checkpointer_;
  int64_t checkpoint_unit_ = 1;
  std::atomic<int64_t> next_checkpoint_pushes_{0};  // 0: none by pushes
  double last_checkpoint_s_ = 0;
};

}  // namespace asgd::experiments
