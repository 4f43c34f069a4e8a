// A worker process of a run on a collective (allreduce_sgd, local_sgd, dpsgd): one rank.
//
// Where the ranks meet. gloo's file store in a folder of the run that the coordinator
// creates afresh for each attempt and names in its RegisterReply (collective_dir,
// subfolders payload/ and control/ for the two groups), rather than a store carried over
// the coordinator's control channel: gloo reads and writes the file store itself, with
// its own waits and timeouts, so the coordinator needs no key/value service and the
// ranks' addresses never pass through it; the cost is that the ranks must share a file
// system with the coordinator (one host under `asgd launch`; a shared folder under SLURM
// or mpirun on several hosts). Each rank listens on the host of its cluster.worker entry.
//
// What the coordinator does for it: the run folder and its record (convergence.csv,
// workers.csv from the reports, staleness.csv, summary.csv), the initial evaluation,
// the time limit, the target, the evaluations by seconds (WorkerReply::evaluate, which
// the ranks vote on), and naming the rank a failed collective lost. What the ranks do
// themselves: stop at the epoch and step limits and hold at the evaluations by epochs
// (collective_rank.h); rank 0 evaluates the average and reports it
// (WorkerReport::evaluation). The coordinator's sample budgets do not apply: a rank
// cannot stop alone.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <utility>

#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "datasets/partition.h"
#include "experiments/cluster/cluster_common.h"
#include "experiments/cluster/cluster_run.h"
#include "experiments/config/exit_status.h"
#include "experiments/config/setup.h"
#include "experiments/config/signals.h"
#include "experiments/record/checkpoint.h"
#include "experiments/run/collective_rank.h"
#include "experiments/run/evaluation.h"
#include "experiments/run/family_session.h"
#include "experiments/run/worker_loop.h"
#include "models/factory.h"
#include "ps/checkpoint.h"
#include "sim/delay_model.h"

namespace asgd::experiments {

namespace col = ::asgd::collective;
namespace tp = ::asgd::transport;
using ::asgd::internal::StrCat;

namespace {

// This rank's options of the gloo group: the plan's (its size, collective.algorithm and
// collective.timeout_ms), its rank, and the host of its worker address (gloo listens there).
col::CollectiveOptions RankOptions(const cluster::Setup& s, int w) {
  col::CollectiveOptions co = s.problem.plan.collective;
  co.rank = w;
  const std::string& address = s.spec.worker[static_cast<std::size_t>(w)];
  co.host = address.substr(0, address.rfind(':'));
  co.Validate();
  return co;
}

// A worker process's peers (family_session.h's Fabric): its rank's gloo groups, meeting
// through gloo's file store in the attempt's collective folder (payload/ and control/).
// Its store side is the shard servers' (worker_role.cc), not built through a Fabric yet.
class ProcessFabric final : public Fabric {
 public:
  // options: this rank's (RankOptions).
  ProcessFabric(col::CollectiveOptions options, std::string collective_dir)
      : options_(std::move(options)), dir_(std::move(collective_dir)) {}

  std::unique_ptr<ps::ParamStore> NewStore(std::span<const float> /*initial*/) override {
    ASGD_CHECK(false, "a worker process of a group builds no store");
    return nullptr;
  }
  std::unique_ptr<col::Collective> Payload(int /*w*/) override { return Connect("/payload"); }
  std::unique_ptr<col::Collective> Control(int /*w*/) override { return Connect("/control"); }
  // Seconds since this process's fabric was made (steady clock).
  double StepTime() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  std::string GroupTransport() const override {
    return StrCat("gloo-", col::AlgorithmName(options_.algorithm));
  }
  std::string DescribeGroup() const override {
    return StrCat("gloo (", col::AlgorithmName(options_.algorithm), ", tcp, rendezvous in ", dir_,
                  ")");
  }

 private:
  std::unique_ptr<col::Collective> Connect(const std::string& sub) const {
    return col::Connect(options_, col::NewFileRendezvous(dir_ + sub));
  }

  const col::CollectiveOptions options_;
  const std::string dir_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// The parameters every rank starts from: the seed's, or in a resumed run the
// checkpoint's average, with plan->first_step its boundary.
std::vector<float> StartingPoint(const cluster::Setup& s, const RegisterReply& registered, int w,
                                 CollectivePlan* plan, std::ostream& out) {
  std::vector<float> initial = s.Initial();
  if (!registered.restore) return initial;
  const std::string& file = registered.restore->file;
  ps::ShardCheckpoint c = cluster::ReadRestoreOrder(*registered.restore);
  if (c.snapshot.values.size() != initial.size()) {
    throw DataError(file, StrCat("holds ", c.snapshot.values.size(), " parameters, the model has ",
                                 initial.size()));
  }
  plan->first_step = static_cast<int64_t>(c.snapshot.version);
  out << "worker " << w << ": resuming at step " << plan->first_step << " from " << file
      << std::endl;
  return std::move(c.snapshot.values);
}

// One rank's side of the run with the coordinator, its Pace (family_session.h): its
// reports (the reporter thread's and the training thread's), the orders the replies carry
// (stop, evaluate, checkpoint, the best accuracy so far) as the rank's wishes, and rank 0's
// evaluations and checkpoint files at the points.
class ProcessPace final : public Pace {
 public:
  ProcessPace(const cluster::Setup& s, int w, cluster::CoordinatorLink& link,
              const RegisterReply& registered, const WorkerLoop& loop)
      : s_(s),
        w_(w),
        link_(link),
        registered_(registered),
        loop_(loop),
        best_known_(registered.best_above),
        eval_model_(s.problem.model->Clone()) {}

  // One report; nullopt when the coordinator did not answer in time.
  std::optional<WorkerReply> Report(bool done, const std::string& failure,
                                    std::optional<CollectiveEvaluation> evaluation,
                                    std::optional<CollectiveSaved> saved = std::nullopt);
  // Pace: the coordinator's stop and orders; rank 0's evaluation and checkpoint at a point.
  bool MayStep() override { return !stop_.load(); }
  void Stepped() override {}
  bool StopWanted() override { return stop_.load(); }
  int64_t EvalWanted(int w) override;
  bool CheckpointWanted() override;
  void AtPoint(const RunPoint& point) override;
  // What the process records of its steps: the losses for its next report.
  RankRecord Record();

  std::atomic<bool>& stop() { return stop_; }
  // Rank 0's evaluation on the whole test set at the end (sent with the last report).
  const std::optional<CollectiveEvaluation>& final_eval() const { return final_eval_; }

 private:
  // Rank 0 when the model can save itself: the run's best test accuracy as the
  // coordinator last told it, or this rank's best evaluation since, whichever is higher.
  void RaiseBest(double accuracy) {
    double b = best_known_.load();
    while (accuracy > b && !best_known_.compare_exchange_weak(b, accuracy)) {
    }
  }
  std::optional<CheckpointOrder> Order() {
    std::lock_guard<std::mutex> lock(order_mu_);
    return checkpoint_order_;
  }
  void Evaluate(const RunPoint& b);
  void Checkpoint(const RunPoint& b);

  const cluster::Setup& s_;
  const int w_;
  cluster::CoordinatorLink& link_;
  const RegisterReply& registered_;
  const WorkerLoop& loop_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> eval_wanted_{0};  // the coordinator's latest EvalOrder id
  std::atomic<double> best_known_;
  std::mutex order_mu_;
  std::optional<CheckpointOrder> checkpoint_order_;  // the latest reply's (guarded)
  int64_t checkpointed_ = -1;  // the step of the last order written (the training thread's)
  int64_t evaluated_ = 0;      // the largest id a boundary answered (the training thread's)
  std::mutex link_mu_;         // the reporter thread and the training loop both report
  cluster::LossSinceReport losses_;
  std::unique_ptr<models::Model> eval_model_;
  std::optional<CollectiveEvaluation> final_eval_;
};

std::optional<WorkerReply> ProcessPace::Report(bool done, const std::string& failure,
                                               std::optional<CollectiveEvaluation> evaluation,
                                               std::optional<CollectiveSaved> saved) {
  WorkerReport body;
  body.task = w_;
  body.metrics = loop_.Snapshot();
  body.done = done;
  body.failure = failure;
  body.evaluation = std::move(evaluation);
  body.saved = std::move(saved);
  losses_.TakeInto(body);
  std::lock_guard<std::mutex> lock(link_mu_);
  auto reply = link_.Report(body, s_.timeout);
  if (reply) {
    if (reply->stop) stop_.store(true);
    eval_wanted_.store(reply->evaluate ? reply->evaluate->id : 0);
    if (reply->best_above) RaiseBest(*reply->best_above);
    std::lock_guard<std::mutex> order_lock(order_mu_);
    checkpoint_order_ = reply->checkpoint;
  }
  return reply;
}

// Rank 0's evaluation of the average at a boundary; the final one goes with its last
// report (after the loop's final counts).
void ProcessPace::Evaluate(const RunPoint& b) {
  const models::EvalResult r =
      EvaluateOn(*eval_model_, b.params, s_.problem.EvalSet(b.final), s_.problem.data.train);
  CollectiveEvaluation e;
  e.id = b.eval_id;
  e.full = b.final;
  e.samples = b.samples;
  // Every rank took b.step steps with the same pushes (the strategies push alike): the
  // pushes of all ranks (the coordinator records rounds, these / N).
  e.updates = loop_.Snapshot().pushes * s_.problem.plan.workers;
  e.loss_sum = r.loss_sum;
  e.correct = r.correct;
  e.count = r.count;
  e.consensus_distance = std::isfinite(b.consensus) ? b.consensus : 0.0;
  // The models, into the coordinator's run folder (shared, as for checkpoints).
  if (!registered_.save_dir.empty()) {
    SaveBestModel(*eval_model_, b.params, r.accuracy(), best_known_.load(), registered_.save_dir);
    RaiseBest(r.accuracy());
    if (b.final) SaveFinalModel(*eval_model_, b.params, registered_.save_dir);
  }
  if (b.final) {
    final_eval_ = e;
  } else if (!Report(false, "", e)) {
    throw InputError(StrCat("worker ", w_, ": the coordinator did not take the evaluation"));
  }
}

// Rank 0's checkpoint file: the average, its version the boundary's step.
void ProcessPace::Checkpoint(const RunPoint& b) {
  const auto o = Order();
  if (!o || o->step == checkpointed_) return;
  ps::ShardSnapshot snap;
  snap.version = static_cast<uint64_t>(b.step);
  snap.values.assign(b.params.begin(), b.params.end());
  const CheckpointManifest::Shard entry =
      WriteShardFile(o->dir, 0, snap, s_.problem.plan.strategy->name);
  CollectiveSaved saved;
  saved.shard = SavedShard{o->step, entry.file, entry.sha256, entry.version, entry.elements};
  saved.pushes = loop_.Snapshot().pushes;
  checkpointed_ = o->step;
  if (!Report(false, "", std::nullopt, saved)) {
    throw InputError(StrCat("worker ", w_, ": the coordinator did not take the checkpoint"));
  }
}

// An order this rank heard of after the point that answered it is not wanted again.
int64_t ProcessPace::EvalWanted(int /*w*/) {
  const int64_t id = eval_wanted_.load();
  return id > evaluated_ ? id : 0;
}

// Rank 0 alone asks for checkpoints (one rank's vote is enough): it writes the file, so it
// must hold the order.
bool ProcessPace::CheckpointWanted() {
  if (w_ != 0) return false;
  const auto o = Order();
  return o && o->step != checkpointed_;
}

void ProcessPace::AtPoint(const RunPoint& point) {
  evaluated_ = std::max(evaluated_, point.eval_id);
  if (point.rank != 0) return;
  // The evaluation first: the checkpoint's rows include it.
  if (point.final || point.evaluate) Evaluate(point);
  if (point.checkpoint) Checkpoint(point);
}

RankRecord ProcessPace::Record() {
  RankRecord record;
  record.step = [this](const algorithms::StepResult& r, int64_t batch, int64_t) {
    losses_.Add(static_cast<double>(r.loss), batch);
  };
  return record;
}

}  // namespace

int RunCollectiveWorkerRole(cluster::Setup& s, std::ostream& out) {
  const int w = s.spec.task_index;
  BlockedStopSignals signals;  // a worker stops when the coordinator says so
  const std::unique_ptr<models::Model> device_model = cluster::WorkerDeviceModel(s, w);
  col::CollectiveOptions co = RankOptions(s, w);

  auto context = tp::NewContext();
  cluster::CoordinatorLink link(context, s, "worker", w);
  const RegisterReply registered = link.Register();
  if (registered.collective_dir.empty()) {
    throw InputError(StrCat("worker ", w, ": the coordinator named no collective folder (is it ",
                            "running the same config?)"));
  }

  CollectivePlan plan =
      CollectivePlan::Make(s.problem.plan, s.problem.strategy_options, s.problem.partitions,
                           s.problem.data.train.num_examples);
  const std::vector<float> initial = StartingPoint(s, registered, w, &plan, out);
  WorkerSetup ws = cluster::WorkerSetupFor(s, w, device_model.get());
  ws.learning_rate = s.problem.plan.learning_rate;  // one rate for the replicas
  ws.skip_batches = plan.first_step;                // continue this worker's sequence of batches
  const auto timing = cluster::WorkerTiming::Attach(s, w, ws);
  WorkerLoop loop(std::move(ws));

  ProcessPace pace(s, w, link, registered, loop);
  ProcessFabric fabric(std::move(co), registered.collective_dir);
  std::atomic<bool> finished{false};
  std::string link_failure;
  // The coordinator's go: every worker registered, the initial evaluation done. Once it
  // was given, every reply says start (a stop then is voted on by the ranks, which must
  // all connect); a stop without it means no rank starts.
  const bool started = cluster::AwaitStart(signals, link, w, pace.stop(),
                                           [&] { return pace.Report(false, "", std::nullopt); });
  std::thread reporter([&] {
    cluster::ReportUntilFinished(signals, link, finished, pace.stop(), link_failure,
                                 [&] { return pace.Report(false, "", std::nullopt).has_value(); });
  });
  WorkerOutcome outcome;
  if (started) outcome = WorkAsRank(plan, w, loop, fabric, pace, initial, pace.Record());
  const std::string failure = cluster::FinishWorker(
      w, outcome.failure, finished, reporter, link_failure, [&](const std::string& f) {
        (void)pace.Report(true, f, f.empty() ? pace.final_eval() : std::nullopt);
      });
  const WorkerMetrics m = loop.Snapshot();
  if (!failure.empty()) {
    out << failure << std::endl;  // it names this worker
    return kExitBadInput;
  }
  out << "worker " << w << ": " << m.steps << " steps, " << m.samples << " samples, " << m.pushes
      << " communication rounds; sent " << m.bytes_pushed << " B, received " << m.bytes_pulled
      << " B through the collective" << std::endl;
  return kExitOk;
}

}  // namespace asgd::experiments
