// A worker of a multi-process training run (cluster_run.h), for both families
// (worker_process.h): the role and its pace.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <utility>

#include "algorithms/schedule.h"
#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "experiments/cluster/cluster_common.h"
#include "experiments/cluster/cluster_run.h"
#include "experiments/cluster/worker_process.h"
#include "experiments/config/exit_status.h"
#include "experiments/config/signals.h"
#include "experiments/record/checkpoint.h"
#include "experiments/run/evaluation.h"
#include "experiments/run/worker_loop.h"
#include "models/factory.h"
#include "ps/checkpoint.h"

namespace asgd::experiments {

namespace alg = ::asgd::algorithms;
namespace tp = ::asgd::transport;
using ::asgd::internal::StrCat;

namespace cluster {

std::unique_ptr<WorkerFamily> WorkerFamily::For(const Setup& s, int w) {
  // The sequential baseline has no cluster run (MakeSetup refuses it): every other
  // strategy meets its peers in a store or a group.
  if (s.problem.plan.family == alg::Family::kGroup) return NewGroupWorker(s, w);
  return NewStoreWorker(s, w);
}

ProcessPace::ProcessPace(const Setup& s, int w, CoordinatorLink& link,
                         const RegisterReply& registered, const WorkerLoop& loop)
    : s_(s),
      w_(w),
      link_(link),
      registered_(registered),
      loop_(loop),
      best_known_(registered.best_above) {}

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
  const int64_t own = body.metrics.samples;
  std::lock_guard<std::mutex> lock(link_mu_);
  auto reply = link_.Report(body, s_.timeout);
  if (reply) {
    global_samples_.store(reply->samples);
    samples_at_report_.store(own);
    sample_budget_.store(reply->sample_budget);
    step_budget_.store(reply->step_budget);
    if (reply->stop) stop_.store(true);
    eval_wanted_.store(reply->evaluate ? reply->evaluate->id : 0);
    if (reply->best_above) RaiseBest(*reply->best_above);
    std::lock_guard<std::mutex> order_lock(order_mu_);
    checkpoint_order_ = reply->checkpoint;
  }
  return reply;
}

bool ProcessPace::Exhausted() const {
  const WorkerMetrics m = loop_.Snapshot();
  return m.samples >= sample_budget_.load() ||
         (step_budget_.load() >= 0 && m.steps >= step_budget_.load());
}

bool ProcessPace::MayStep(double* lr_scale) {
  // Out of budget: ask the coordinator for more (or to stop) before the next step.
  while (!stop_.load() && Exhausted()) {
    if (!Report(false, "")) {
      if (link_.Lost()) return false;
      continue;
    }
    if (!stop_.load() && Exhausted()) std::this_thread::sleep_for(link_.interval());
  }
  if (stop_.load(std::memory_order_relaxed)) return false;
  // The run's samples as of the last report, plus this worker's since.
  const int64_t estimate =
      global_samples_.load() + loop_.Snapshot().samples - samples_at_report_.load();
  const double train_size = static_cast<double>(s_.problem.data.train.num_examples);
  *lr_scale =
      alg::LearningRateScale(s_.problem.schedule, static_cast<double>(estimate) / train_size);
  return true;
}

// A request that timed out (a shard died), or a chunked push whose first chunks went to
// the dead shard and whose rest reached its restarted successor (refused whole, nothing
// applied: ps/message.h, "Chunked pushes"): wait while the coordinator pauses the run for
// the shard's restart, then go on from a fresh read of the centre. The push is not sent
// again (it may have been applied when it timed out).
bool ProcessPace::Recover(const ps::Status& st) {
  const bool incomplete = st.code() == ps::StatusCode::kRemoteError &&
                          st.error_code() == ps::ErrorCode::kIncompletePush;
  if (st.code() != ps::StatusCode::kTimeout && st.code() != ps::StatusCode::kAborted && !incomplete)
    return false;
  ASGD_LOG(kWarning, "worker ", w_, ": ", st.ToString(),
           "; asking the coordinator whether to go on");
  for (;;) {
    if (stop_.load()) return false;
    auto reply = Report(false, "");
    if (!reply) {
      if (link_.Lost()) return false;
      continue;
    }
    if (!reply->paused) return !stop_.load();
    std::this_thread::sleep_for(link_.interval());
  }
}

// The coordinator closes the shards once it told every worker to stop, but its reply may
// reach this process after a shard's kShuttingDown answer did (the reporter thread waits
// for its turn on a busy machine): ask, rather than call the run's end a failure.
bool ProcessPace::Ended() {
  if (stop_.load()) return true;
  (void)Report(false, "");
  return stop_.load();
}

void ProcessPace::RaiseBest(double accuracy) {
  double b = best_known_.load();
  while (accuracy > b && !best_known_.compare_exchange_weak(b, accuracy)) {
  }
}

std::optional<CheckpointOrder> ProcessPace::Order() {
  std::lock_guard<std::mutex> lock(order_mu_);
  return checkpoint_order_;
}

// Rank 0's evaluation of the average at a boundary; the final one goes with its last
// report (after the loop's final counts).
void ProcessPace::Evaluate(const RunPoint& b) {
  if (eval_model_ == nullptr) eval_model_ = s_.problem.model->Clone();
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

WorkerRecord ProcessPace::Record() {
  WorkerRecord record;
  record.step = [this](const alg::StepResult& r, int64_t batch, int64_t) {
    losses_.Add(static_cast<double>(r.loss), batch);
  };
  return record;
}

}  // namespace cluster

int RunTrainingWorkerRole(const Config& config, const RoleRequest& request, std::ostream& out) {
  cluster::Setup s = cluster::MakeSetup(config, request, "worker");
  const int w = s.spec.task_index;
  BlockedStopSignals signals;  // a worker stops when the coordinator says so
  // The worker's model on its device (model.device), and its family's options, before
  // registering: what this process cannot use is a ConfigError here, not a failure after
  // the run started.
  const std::unique_ptr<models::Model> device_model = cluster::WorkerDeviceModel(s, w);
  const std::unique_ptr<cluster::WorkerFamily> family = cluster::WorkerFamily::For(s, w);
  auto context = tp::NewContext();
  cluster::CoordinatorLink link(context, s, "worker", w);
  const RegisterReply registered = link.Register();
  family->Open(context, registered, out);

  WorkerSetup ws = cluster::WorkerSetupFor(s, w, device_model.get());
  family->SetUp(ws);
  const auto timing = cluster::WorkerTiming::Attach(s, w, ws);
  WorkerLoop loop(std::move(ws));

  cluster::ProcessPace pace(s, w, link, registered, loop);
  std::atomic<bool> finished{false};
  std::string link_failure;
  // The coordinator's go: every worker and shard registered, the initial evaluation done,
  // reporting as the heartbeat. Once it was given, every reply says start (a group's stop
  // then is voted on by the ranks, which must all connect); a stop without it means no
  // worker starts.
  const bool started =
      cluster::AwaitStart(signals, link, w, pace.stop(), [&] { return pace.Report(false, ""); });
  std::thread reporter([&] {
    cluster::ReportUntilFinished(signals, link, finished, pace.stop(), link_failure,
                                 [&] { return pace.Report(false, "").has_value(); });
  });
  WorkerOutcome outcome;
  if (started) outcome = family->Work(loop, pace);
  const std::string failure = cluster::FinishWorker(
      w, outcome.failure, finished, reporter, link_failure, [&](const std::string& f) {
        (void)pace.Report(true, f, f.empty() ? pace.final_eval() : std::nullopt);
      });
  const WorkerMetrics m = loop.Snapshot();
  if (!failure.empty()) {
    out << failure << std::endl;  // it names this worker
    return kExitBadInput;
  }
  out << "worker " << w << ": " << m.steps << " steps, " << m.samples << " samples, "
      << family->Account(m) << std::endl;
  return kExitOk;
}

}  // namespace asgd::experiments
