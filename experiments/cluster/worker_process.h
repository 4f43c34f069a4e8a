// A worker process of a training run (cluster_run.h), written once for both strategy
// families (algorithms::Family), as the in-process executors are (experiments/run/
// family_session.h): worker_role.cc registers with the coordinator, meets the peers,
// waits for the go, reports while the worker's loop runs and sends the last report. Its
// side of the run is ProcessPace, the executor's Pace: the coordinator's replies answer
// what the loop asks. What differs between the families is chosen once
// (WorkerFamily::For):
//
//   worker_store.cc  a client of the shard servers; the loop is WorkAsStoreWorker, its
//                    steps within the coordinator's budgets, its rate at the run's samples
//                    as last reported, a lost shard's restart waited out;
//   worker_group.cc  a rank of the gloo groups that meet in the attempt's collective folder
//                    (where and why: there); the loop is WorkAsRank, rank 0 evaluating and
//                    checkpointing the average at the points the coordinator's orders ask.
//
// A worker process keeps no record: the coordinator keeps it from the reports.
// Internal to experiments/cluster.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>

#include "experiments/cluster/cluster_common.h"
#include "experiments/cluster/control_protocol.h"
#include "experiments/run/family_session.h"
#include "experiments/run/worker_loop.h"
#include "models/model.h"
#include "transport/context.h"

namespace asgd::experiments::cluster {

// A worker process's answers to its loop, from the coordinator's replies. Its reports go
// from the reporter thread and the training thread (Report is thread-safe).
//   store: MayStep holds the worker within the sample and step budgets the coordinator
//          grants (asking for more when they run out) and scales the rate at the run's
//          samples (the last reply's, plus this worker's since); Recover waits while the
//          coordinator pauses the run for a lost shard's restart; Ended asks the
//          coordinator whether an unanswered request was the run's end.
//   group: the coordinator's stop, evaluation and checkpoint orders are the rank's wishes
//          at its votes; at a point rank 0 evaluates the average (saving the best and
//          final models) and writes the checkpoint's file, and reports both. The sample
//          budgets do not apply: a rank cannot stop alone.
class ProcessPace final : public Pace {
 public:
  ProcessPace(const Setup& s, int w, CoordinatorLink& link, const RegisterReply& registered,
              const WorkerLoop& loop);

  // One report; nullopt when the coordinator did not answer in time.
  std::optional<WorkerReply> Report(bool done, const std::string& failure,
                                    std::optional<CollectiveEvaluation> evaluation = std::nullopt,
                                    std::optional<CollectiveSaved> saved = std::nullopt);

  bool MayStep(double* lr_scale) override;
  bool Recover(const ps::Status& st) override;
  void Stepped() override {}
  bool StopWanted() override { return stop_.load(); }
  bool Ended() override;
  int64_t EvalWanted(int w) override;
  bool CheckpointWanted() override;
  void AtPoint(const RunPoint& point) override;
  // What the process records of its steps: the losses for its next report.
  WorkerRecord Record();

  std::atomic<bool>& stop() { return stop_; }
  // Rank 0's evaluation on the whole test set at the end (sent with the last report).
  const std::optional<CollectiveEvaluation>& final_eval() const { return final_eval_; }

 private:
  bool Exhausted() const;
  // Rank 0 when the model can save itself: the run's best test accuracy as the
  // coordinator last told it, or this rank's best evaluation since, whichever is higher.
  void RaiseBest(double accuracy);
  std::optional<CheckpointOrder> Order();
  void Evaluate(const RunPoint& b);
  void Checkpoint(const RunPoint& b);

  const Setup& s_;
  const int w_;
  CoordinatorLink& link_;
  const RegisterReply& registered_;
  const WorkerLoop& loop_;
  std::atomic<bool> stop_{false};
  std::mutex link_mu_;  // the reporter thread and the training loop both report
  LossSinceReport losses_;
  // A store's worker: the run's samples and this worker's budgets as the last reply said,
  // and this worker's samples when it was sent.
  std::atomic<int64_t> global_samples_{0}, samples_at_report_{0};
  std::atomic<int64_t> sample_budget_{0}, step_budget_{-1};
  // A group's rank: the coordinator's latest EvalOrder id, the best accuracy, the latest
  // checkpoint order (guarded by order_mu_); on the training thread, the step of the last
  // order written and the largest id a point answered.
  std::atomic<int64_t> eval_wanted_{0};
  std::atomic<double> best_known_;
  std::mutex order_mu_;
  std::optional<CheckpointOrder> checkpoint_order_;
  int64_t checkpointed_ = -1;
  int64_t evaluated_ = 0;
  std::unique_ptr<models::Model> eval_model_;  // rank 0's, made at its first evaluation
  std::optional<CollectiveEvaluation> final_eval_;
};

// What differs between the families in a worker process.
class WorkerFamily {
 public:
  // Worker w's family part, by the plan's family. Throws ConfigError for options of the
  // family this worker cannot use (before it registers).
  static std::unique_ptr<WorkerFamily> For(const Setup& s, int w);
  virtual ~WorkerFamily() = default;

  // After registering: where the worker meets its peers (the shard servers, once they all
  // answer; the collective folder the reply names) and, for a resumed group run, the
  // checkpoint it starts from (a line to `out`). Throws InputError or DataError, naming
  // the worker or the file.
  virtual void Open(std::shared_ptr<transport::Context> context, const RegisterReply& registered,
                    std::ostream& out) = 0;
  // What the family changes in the worker's setup.
  virtual void SetUp(WorkerSetup& ws) const = 0;
  // The worker's loop over its peers until the run or the worker ends.
  virtual WorkerOutcome Work(WorkerLoop& loop, ProcessPace& pace) = 0;
  // The last line's account of the exchanges, after "worker W: S steps, N samples, ".
  virtual std::string Account(const WorkerMetrics& m) const = 0;
};

// The two families (worker_store.cc, worker_group.cc); WorkerFamily::For chooses.
std::unique_ptr<WorkerFamily> NewStoreWorker(const Setup& s, int w);
std::unique_ptr<WorkerFamily> NewGroupWorker(const Setup& s, int w);

}  // namespace asgd::experiments::cluster
