// What the processes of a multi-process training run (cluster_run.h) share: the setup
// each derives from the config, a role's typed link to the coordinator
// (control_protocol.h over transport/control.h) and the evaluation of the centre.
// Internal to experiments/cluster (the coordinator, ps, worker and evaluator roles).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/schedule.h"
#include "algorithms/strategy.h"
#include "core/aligned.h"
#include "core/clock.h"
#include "datasets/dataset.h"
#include "experiments/cluster/control_protocol.h"
#include "experiments/cluster/roles.h"
#include "experiments/config/config.h"
#include "experiments/config/signals.h"
#include "experiments/run/problem.h"
#include "experiments/run/worker_loop.h"
#include "models/model.h"
#include "sim/delay_model.h"
#include "ps/checkpoint.h"
#include "ps/placement.h"
#include "transport/cluster_spec.h"
#include "transport/context.h"
#include "transport/control.h"
#include "transport/curve.h"
#include "transport/ps_client.h"
#include "transport/shard_server.h"

namespace asgd::experiments::cluster {

using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

// seconds, rounded up to whole milliseconds.
milliseconds Ms(double seconds);
// Seconds since the Unix epoch.
double WallSeconds();

// The last line a ps role prints: what its shard server held for peers and what it
// refused to bound them (transport::ShardStats, issue 22), as
//   "ps N bounds: queued_reply_bytes=.. pinned_snapshots=.. held_barriers=..
//    replies_dropped=.. replies_over_budget=.. barriers_timed_out=.. barriers_refused=..
//    stops_refused=.. non_finite_refused=.. auth_refused=.."
// (one line; the held values are at the end of the run, the others totals).
std::string PeerBoundsLine(int shard, const transport::ShardStats& stats);

// Wall-clock time (seconds since the Unix epoch), for staleness records made in one
// process and placed on the coordinator's time axis in another.
class WallClock final : public Clock {
 public:
  Duration Now() const override;
  void SleepFor(Duration d) override;
};

// What every process of the run derives from the config.
struct Setup {
  explicit Setup(const Config& c) : config(c) {}
  Config config;  // algorithm.workers set to the cluster's worker count
  transport::ClusterSpec spec;
  // The plan (the config resolved, typed: seed, strategy, workers, compression, chunk
  // bytes, ...), the data, the CPU model, the optimizer, strategy and schedule options and
  // the workers' partitions: LoadProblem's, as in `asgd run`.
  Problem problem;
  ps::Placement placement;  // the shards' split of the parameters (cluster.ps)
  milliseconds timeout{60000}, report_interval{100}, heartbeat_timeout{10000};
  transport::CurveOptions curve;  // cluster.curve: this process's keys (experiments/cluster/keys.h)

  // The [cluster] keys, typed (the plan's).
  const ClusterPlan& cluster() const { return problem.plan.cluster; }

  // The initial parameters (from the seed).
  std::vector<float> Initial() const;
  std::string CoordinatorAddress() const { return spec.CoordinatorAddress(); }
};

// The setup of `role` ("coordinator", "ps", "worker", "evaluator"): loads the data,
// builds the model and placement, validates the strategy's options. Throws
// ConfigError/InputError naming the key.
Setup MakeSetup(const Config& config, const RoleRequest& request, const std::string& role);

// A role's link to the coordinator: registration, then reports, each answered by the
// reply type the role expects. A reply the coordinator refused or that does not decode
// throws InputError ("<role> <task>: ..."), one line.
class CoordinatorLink {
 public:
  CoordinatorLink(std::shared_ptr<transport::Context> context, const Setup& setup, std::string role,
                  int task);

  // Registers, retrying until the coordinator answers (it may start later) or the
  // run's timeout passes. Throws InputError if it refuses or never answers.
  RegisterReply Register();
  // One report; nullopt if the coordinator did not answer within timeout.
  std::optional<WorkerReply> Report(const WorkerReport& report, milliseconds timeout);
  std::optional<PsReply> Report(const PsReport& report, milliseconds timeout);
  std::optional<EvaluatorReply> Report(const EvaluatorReport& report, milliseconds timeout);
  // True when the coordinator has not answered for longer than the run allows.
  bool Lost() const { return Steady::now() - last_answer_ > patience_; }
  milliseconds interval() const { return interval_; }

 private:
  template <typename Reply>
  std::optional<Reply> Send(const std::string& bytes, milliseconds timeout);

  transport::ControlClient client_;
  std::string client_address_;
  std::string role_;
  int task_;
  milliseconds interval_;
  milliseconds patience_;
  Steady::time_point last_answer_ = Steady::now();
};

// Worker w's model on its device (model.device) when that is a GPU, else null (the setup's
// model serves); a device this process cannot use is a ConfigError here, before the
// worker registers.
std::unique_ptr<models::Model> WorkerDeviceModel(const Setup& setup, int w);

// Worker w's loop setup: the strategy and its options, the optimizer, the model
// (device_model if not null, else the setup's), the data and its partition (from the
// seed), the batch size, the seed and the rate (WorkerLearningRate); the caller sets the
// clock and anything else.
WorkerSetup WorkerSetupFor(const Setup& setup, int w, const models::Model* device_model);

// A worker process's clock, and its [delay] model as injected sleeps after each gradient
// (as in the thread runner; the same seed, so every process agrees on the stragglers).
// Attach sets ws.clock and, with a [delay] model, ws.after_gradient; both point into this
// object, which must outlive the loop.
struct WorkerTiming {
  std::unique_ptr<Clock> clock;
  std::unique_ptr<sim::DelayModel> delay;
  static std::unique_ptr<WorkerTiming> Attach(const Setup& setup, int w, WorkerSetup& ws);
};

// A worker's training loss since its last report: the training thread adds, whichever
// thread reports takes (and resets) the sums.
class LossSinceReport {
 public:
  void Add(double loss, int64_t batch);
  void TakeInto(WorkerReport& report);

 private:
  std::mutex mu_;
  double sum_ = 0;
  int64_t count_ = 0;
};

// The end of a worker process, after its loop: joins the reporter (finished set first),
// names the failure (the loop's, else the link's as "worker W: ..."), and sends the final
// report through final_report(failure) (a failure to send it is logged, not thrown).
// Returns the failure ("" = none).
std::string FinishWorker(int w, const std::string& loop_failure, std::atomic<bool>& finished,
                         std::thread& reporter, const std::string& link_failure,
                         const std::function<void(const std::string& failure)>& final_report);

// A worker's wait for the coordinator's go (WorkerReply::start), reporting as its
// heartbeat: report() sends one report and returns the reply (nullopt: none in time), and
// sets *stop when the reply says so. Returns true at the go, false when *stop came first.
// Throws InputError ("worker W: ...") when the coordinator stops answering or on SIGINT /
// SIGTERM.
bool AwaitStart(const BlockedStopSignals& signals, const CoordinatorLink& link, int worker,
                const std::atomic<bool>& stop,
                const std::function<std::optional<WorkerReply>()>& report);

// A worker's reporter thread: reports every link.interval() until *finished. A stop
// signal, a coordinator that stopped answering or a report that threw set *stop and
// *failure (one line) and end it. report() returns whether the coordinator answered.
void ReportUntilFinished(const BlockedStopSignals& signals, const CoordinatorLink& link,
                         const std::atomic<bool>& finished, std::atomic<bool>& stop,
                         std::string& failure, const std::function<bool()>& report);

// The shard file of a RestoreOrder, read and checked against its SHA-256. Throws DataError
// naming the file (missing, another digest, malformed).
ps::ShardCheckpoint ReadRestoreOrder(const RestoreOrder& order);

// Pulls the centre and evaluates it (the evaluator role, or the coordinator itself).
class CentreEvaluator {
 public:
  CentreEvaluator(std::shared_ptr<transport::Context> context, const Setup& setup);
  ps::Status WaitForServers();
  // Evaluates on the whole test set (full) or metrics.eval_examples of it; nullopt when
  // reading the centre timed out (a shard is down: the evaluation is retried or
  // dropped). Throws InputError when a shard answers with an error.
  std::optional<models::EvalResult> Evaluate(bool full);
  // SaveFinalModel (experiments/run/evaluation.h) of the centre the last Evaluate read.
  void SaveFinal(const std::string& run_dir) const;
  // SaveBestModel of the centre the last Evaluate read, whose accuracy that was.
  void SaveBest(double accuracy, double best_before, const std::string& run_dir) const;

 private:
  const Setup& setup_;
  std::unique_ptr<models::Model> model_;
  AlignedVector<float> centre_;
  std::unique_ptr<transport::PsClient> client_;
};

}  // namespace asgd::experiments::cluster
