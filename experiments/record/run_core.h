// The run core every driver shares (sequential `runner.cc`, the threads and simulator
// drivers `threads_driver.cc` and `sim_driver.cc`, and the multi-process coordinator,
// `coordinator*.cc`): what a run records, when it stops,
// and when it evaluates. The drivers differ only in where workers and shards live.
//
//   RunRecorder   the run folder's files: convergence.csv (its columns defined here, once),
//                 workers.csv, staleness_histogram.csv, summary.csv and the end of
//                 provenance.json; it also keeps the best / final / time-to-target account
//                 that summary.csv reports.
//   StopPolicy    the one list of stop reasons (epochs, max_steps, max_time_s, target
//                 accuracy, a non-finite loss, a signal) and their wording.
//   EvalSchedule  evaluation by epochs (samples), by seconds, and the final full one.
//   TrainingClock the time_s of every row and limit: one rule for every driver (below).
//
// Thread safety: none of these is thread-safe; the thread that evaluates (the main thread,
// or the coordinator's loop) owns them. Workers see only StopPolicy::WorkMayContinue,
// which is const and reads nothing mutable.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/clock.h"
#include "experiments/config/config.h"
#include "experiments/record/csv.h"
#include "experiments/record/metrics.h"

namespace asgd::experiments {

class RunDir;

// The columns of convergence.csv, in order; results/README.md documents them. With
// ef_residual (compression.error_feedback on), ef_residual_norm follows the others.
const std::vector<std::string>& ConvergenceColumns(bool ef_residual = false);

// One convergence.csv row: the evaluated parameters' test loss and accuracy, and the
// training they had seen.
struct ConvergenceRow {
  double time_s = 0;  // training time (TrainingClock) when evaluation began
  double epoch = 0;   // samples / training examples
  int64_t samples = 0;
  int64_t updates = 0;    // optimizer steps (sequential) or pushes (distributed)
  double train_loss = 0;  // mean training loss since the previous row; NaN if none
  double test_loss = 0;
  double test_accuracy = 0;
  int64_t eval_examples = 0;  // test examples evaluated
  double learning_rate = 0;
  // The strategies on a collective: the mean squared distance of the workers' parameters
  // from their average, (1/N)·Σ‖θ_i − θ̄‖² (dpsgd's consensus; 0 up to rounding for
  // allreduce_sgd and local_sgd at a round boundary). NaN (written "nan") for the others.
  double consensus_distance = std::numeric_limits<double>::quiet_NaN();
  // With compression.error_feedback: sqrt(sum over workers of ||e_w||^2), the residuals
  // as of each worker's last push. Written only by a recorder built with the column.
  double ef_residual_norm = 0;
};

// Writes a run's CSVs and the end of its provenance, with the schemas of results/README.md.
class RunRecorder {
 public:
  // Opens convergence.csv in `run` (truncating, with a header; or, when existing_rows >= 0,
  // appending to a file that holds that many rows already: a resumed run).
  // target_accuracy > 0: time_to_target() is the time of the first row reaching it.
  // Throws IoError.
  // ef_residual: convergence.csv has the ef_residual_norm column.
  RunRecorder(const RunDir& run, double target_accuracy, int64_t existing_rows = -1,
              bool ef_residual = false);
  // The same with convergence.csv on an injected stream (tests).
  RunRecorder(std::ostream* convergence, double target_accuracy, int64_t existing_rows = -1,
              bool ef_residual = false);
  ~RunRecorder();

  // Writes a row and updates the account. Returns true when this row is the first to
  // reach the target accuracy.
  bool Convergence(const ConvergenceRow& row);

  // Continues a resumed run's account.
  void RestoreAccount(double best_test_accuracy, double time_to_target_s);

  int64_t convergence_rows() const { return rows_; }  // including existing_rows
  double best_test_accuracy() const { return best_; }
  double final_test_accuracy() const { return final_accuracy_; }
  double final_test_loss() const { return final_loss_; }
  double time_to_target_s() const { return time_to_target_; }  // < 0: not reached

  // summary.csv's row with the account filled in (best, final, target, time to target);
  // the driver fills in what the run was.
  SummaryRow Summary() const;

  // The end of the run: writes workers.csv, staleness_histogram.csv (if `staleness` is
  // not null), summary.csv, and rewrites provenance.json with status, reason and the
  // headline numbers (plus the staleness ones when `staleness` is given, and any `more`
  // fields: the coordinator's lost workers, restarts, ...). summary.csv's `steps` is the
  // sum of the workers' steps, whatever summary.steps holds. Throws IoError.
  static void Finish(const RunDir& run, const SummaryRow& summary,
                     const std::vector<WorkerMetrics>& workers, const StalenessRecorder* staleness,
                     const std::string& reason,
                     const std::map<std::string, std::string>& more = {});

 private:
  std::unique_ptr<std::ostream> file_;  // null when the stream is injected
  std::unique_ptr<CsvWriter> csv_;
  double target_;
  bool ef_residual_ = false;
  int64_t rows_ = 0;
  double best_ = 0;
  double final_accuracy_ = 0;
  double final_loss_ = 0;
  double time_to_target_ = -1;
};

// A non-finite training loss at the first step, computed on the initial parameters before
// any update was applied: the model produced it (`model`: its Model::Source(), e.g.
// "model.file = net.pt"), so the reason names the model and no rate. `who` is "" or,
// for a worker of a distributed run, " on worker 2".
std::string NonFiniteFirstLossReason(double loss, const std::string& who, const std::string& model);

// When a run stops, and why. Built from the experiment.* keys; the reasons are the texts
// recorded in provenance.json and printed at the end of a run.
class StopPolicy {
 public:
  struct Limits {
    double epochs = 1;            // experiment.epochs
    int64_t max_steps = 0;        // <= 0: none; worker steps summed over workers
    double max_time_s = 0;        // <= 0: none
    double target_accuracy = 0;   // <= 0: none
    bool stop_at_target = false;  // REQUIRES target_accuracy > 0 when true
    // The configured texts the reasons quote (as written in the config).
    std::string epochs_text, max_time_text, target_text, learning_rate_text;
  };
  // Throws ConfigError (experiment.stop_at_target without a target).
  StopPolicy(Limits limits, int64_t train_examples);
  // Reads experiment.{epochs,max_steps,max_time_s,target_accuracy,stop_at_target}.
  static StopPolicy FromConfig(const Config& config, int64_t train_examples);

  // The reason to stop now, in this order: epochs, max_steps, max_time_s, target (only
  // with stop_at_target, when target_reached); nullopt: go on.
  std::optional<std::string> Check(int64_t samples, int64_t steps, double seconds,
                                   bool target_reached) const;
  // Whether a worker may take another step (the epoch and step limits only: the time
  // and target limits are the evaluating thread's to decide).
  bool WorkMayContinue(int64_t samples, int64_t steps) const;

  const Limits& limits() const { return limits_; }
  double total_samples() const { return total_samples_; }
  double target_accuracy() const { return limits_.target_accuracy; }
  bool stop_at_target() const { return limits_.stop_at_target; }

  // The reasons, worded once.
  std::string EpochsReason() const;
  std::string StepsReason() const;
  std::string TimeReason() const;
  std::string TargetReason() const;
  // A non-finite training loss at `update` (1-based), with the advice to lower the rate.
  // At update 1, before any update was applied, see NonFiniteFirstLossReason instead.
  std::string NonFiniteLossReason(double loss, int64_t update) const;
  // A stop signal: "interrupted (SIGINT)" or "terminated (SIGTERM)" (the coordinator's
  // wording; a failure, not a completed run).
  static std::string SignalReason(int signal);

 private:
  Limits limits_;
  double total_samples_;
};

// When to evaluate: every `every_samples` training samples, and every `every_s` seconds
// when that is > 0; scheduled evaluations use `eval_examples` test examples (<= 0: all;
// which ones: Problem::eval_subset); the final evaluation always uses all of them.
class EvalSchedule {
 public:
  // REQUIRES every_samples > 0.
  EvalSchedule(double every_samples, double every_s, int64_t eval_examples);
  // Reads metrics.{eval_every_epochs,eval_every_s,eval_examples}.
  static EvalSchedule FromConfig(const Config& config, int64_t train_examples);

  // Whether a scheduled evaluation is due at `samples` and `seconds`.
  bool Due(int64_t samples, double seconds) const;
  // Records an evaluation of the parameters after `samples` samples, begun at `seconds`:
  // the next by samples is the first multiple of every_samples above `samples`.
  // full: it covered the whole test set.
  void Evaluated(int64_t samples, double seconds, bool full);
  // Records the time of an evaluation without moving the samples mark (the initial row,
  // or a driver that times the schedule from after the evaluation).
  void SetLastTime(double seconds) { last_s_ = seconds; }

  // Whether a scheduled evaluation covers the whole test set (metrics.eval_examples <= 0).
  bool ScheduledIsFull() const { return eval_examples_ <= 0; }
  // Whether the final full evaluation is still needed at `samples`: false when the last
  // evaluation was at exactly these samples and was full (or was the first row, at 0).
  bool FinalNeeded(int64_t samples) const;

  double next_samples() const { return next_samples_; }
  double last_s() const { return last_s_; }

 private:
  double every_samples_;
  double every_s_;
  int64_t eval_examples_;
  double next_samples_;
  double last_s_ = 0;
  int64_t last_samples_ = -1;
  bool last_full_ = false;
};

// Training time, the time_s of convergence.csv, summary.csv's wall_time_s and
// time_to_target_s, and what experiment.max_time_s, metrics.eval_every_s and
// experiment.checkpoint_every_s count. One rule for every driver: the time on `clock`
// since training began (Start), plus a resumed run's training time before its checkpoint
// (base_s), minus the time the workers were held for an evaluation (Hold .. Release).
// A driver holds its workers while it evaluates when it can: the sequential runner
// evaluates between steps, the thread runner keeps its workers from starting a step until
// the evaluation ends; the process runner does not hold its workers (they keep training
// while the evaluator works), so nothing is taken out of its time.
class TrainingClock {
 public:
  // `clock` must outlive this.
  explicit TrainingClock(const Clock* clock, double base_s = 0);

  // Training begins now; before, Seconds() is base_s. Only the first call counts.
  void Start();
  bool started() const { return started_; }
  // base_s + the time since Start that the workers were not held; constant while held.
  double Seconds() const;

  // The workers are held for an evaluation from now until Release.
  // REQUIRES !held() (Hold), held() (Release).
  void Hold();
  void Release();
  bool held() const { return held_; }
  // The time taken out so far (held periods after Start).
  double held_s() const;

 private:
  const Clock* clock_;
  double base_s_;
  bool started_ = false;
  Duration start_{0};
  Duration held_total_{0};
  bool held_ = false;
  Duration held_since_{0};
};

}  // namespace asgd::experiments
