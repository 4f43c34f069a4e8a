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
#include <cmath>
#include <mutex>
#include <optional>
#include <ostream>
#include <thread>

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
#include "experiments/run/worker_loop.h"
#include "models/factory.h"
#include "ps/checkpoint.h"
#include "sim/delay_model.h"

namespace asgd::experiments {

namespace col = ::asgd::collective;
namespace tp = ::asgd::transport;
using ::asgd::internal::StrCat;

int RunCollectiveWorkerRole(cluster::Setup& s, std::ostream& out) {
  const int w = s.spec.task_index;
  BlockedStopSignals signals;  // a worker stops when the coordinator says so
  const std::unique_ptr<models::Model> device_model = cluster::WorkerDeviceModel(s, w);
  col::CollectiveOptions co;
  co.rank = w;
  co.size = s.problem.plan.workers;
  co.algorithm = col::ParseAlgorithm(s.config.String("collective.algorithm"));
  co.timeout = std::chrono::milliseconds(s.config.Int("collective.timeout_ms"));
  const std::string& address = s.spec.worker[static_cast<std::size_t>(w)];
  co.host = address.substr(0, address.rfind(':'));
  co.Validate();

  auto context = tp::NewContext();
  cluster::CoordinatorLink link(context, s, "worker", w);
  const RegisterReply registered = link.Register();
  if (registered.collective_dir.empty()) {
    throw InputError(StrCat("worker ", w, ": the coordinator named no collective folder (is it ",
                            "running the same config?)"));
  }

  CollectivePlan plan =
      CollectivePlan::Make(s.config, *s.problem.plan.strategy, s.problem.strategy_options,
                           s.problem.partitions, s.problem.data.train.num_examples);
  // A resumed run: every rank starts from the checkpoint's average, at its boundary.
  std::vector<float> initial = s.Initial();
  if (registered.restore) {
    const std::string& file = registered.restore->file;
    ps::ShardCheckpoint c = cluster::ReadRestoreOrder(*registered.restore);
    if (c.snapshot.values.size() != initial.size()) {
      throw DataError(file, StrCat("holds ", c.snapshot.values.size(),
                                   " parameters, the model has ", initial.size()));
    }
    initial = std::move(c.snapshot.values);
    plan.first_step = static_cast<int64_t>(c.snapshot.version);
    out << "worker " << w << ": resuming at step " << plan.first_step << " from " << file
        << std::endl;
  }
  WorkerSetup ws = cluster::WorkerSetupFor(s, w, device_model.get());
  ws.learning_rate = s.config.Double("algorithm.learning_rate");  // one rate for the replicas
  ws.skip_batches = plan.first_step;  // continue this worker's sequence of batches
  auto clock = NewSystemClock();
  ws.clock = clock.get();
  // The [delay] model as injected sleeps after each gradient (as in the thread runner; the
  // same seed, so every process agrees on the stragglers).
  std::unique_ptr<sim::DelayModel> delay;
  if (HasDelayModel(s.config)) {
    delay =
        std::make_unique<sim::DelayModel>(BuildSimOptions(s.config).delay, s.problem.plan.workers,
                                          DeriveSeed(s.problem.plan.seed, "delay"));
    ws.after_gradient = InjectedDelay(delay.get(), clock.get(), w);
  }
  WorkerLoop loop(std::move(ws));

  std::atomic<bool> stop{false}, finished{false};
  std::atomic<int64_t> eval_wanted{0};  // the coordinator's latest EvalOrder id
  // Rank 0 when the model can save itself: the run's best test accuracy as the
  // coordinator last told it, or this rank's best evaluation since, whichever is higher.
  std::atomic<double> best_known{registered.best_above};
  auto raise_best = [&](double accuracy) {
    double b = best_known.load();
    while (accuracy > b && !best_known.compare_exchange_weak(b, accuracy)) {
    }
  };
  std::mutex order_mu;
  std::optional<CheckpointOrder> checkpoint_order;  // the latest reply's (guarded)
  int64_t checkpointed = -1;  // the step of the last order written (the training thread's)
  int64_t evaluated = 0;      // the largest id a boundary answered (the training thread's)
  std::mutex link_mu;         // the reporter thread and the training loop both report
  std::mutex loss_mu;
  double loss_sum = 0;
  int64_t loss_count = 0;
  std::string link_failure;
  auto report =
      [&](bool done, const std::string& failure, std::optional<CollectiveEvaluation> evaluation,
          std::optional<CollectiveSaved> saved = std::nullopt) -> std::optional<WorkerReply> {
    WorkerReport body;
    body.task = w;
    body.metrics = loop.Snapshot();
    body.done = done;
    body.failure = failure;
    body.evaluation = std::move(evaluation);
    body.saved = std::move(saved);
    {
      std::lock_guard<std::mutex> lock(loss_mu);
      body.loss_sum = loss_sum;
      body.loss_count = loss_count;
      loss_sum = 0;
      loss_count = 0;
    }
    std::lock_guard<std::mutex> lock(link_mu);
    auto reply = link.Report(body, s.timeout);
    if (reply) {
      if (reply->stop) stop.store(true);
      eval_wanted.store(reply->evaluate ? reply->evaluate->id : 0);
      if (reply->best_above) raise_best(*reply->best_above);
      std::lock_guard<std::mutex> order_lock(order_mu);
      checkpoint_order = reply->checkpoint;
    }
    return reply;
  };
  // The coordinator's go: every worker registered, the initial evaluation done. Once it
  // was given, every reply says start (a stop then is voted on by the ranks, which must
  // all connect); a stop without it means no rank starts.
  const bool started =
      cluster::AwaitStart(signals, link, w, stop, [&] { return report(false, "", std::nullopt); });
  std::thread reporter([&] {
    cluster::ReportUntilFinished(signals, link, finished, stop, link_failure,
                                 [&] { return report(false, "", std::nullopt).has_value(); });
  });

  std::optional<CollectiveEvaluation> final_eval;
  std::unique_ptr<models::Model> eval_model = s.problem.model->Clone();
  CollectiveRankHooks hooks;
  hooks.stop_wanted = [&] { return stop.load(); };
  // An order this rank heard of after the boundary that answered it is not wanted again.
  hooks.eval_wanted = [&]() -> int64_t {
    const int64_t id = eval_wanted.load();
    return id > evaluated ? id : 0;
  };
  // Rank 0 alone asks for checkpoints (one rank's vote is enough): it writes the file, so
  // it must hold the order.
  auto order = [&]() -> std::optional<CheckpointOrder> {
    std::lock_guard<std::mutex> lock(order_mu);
    return checkpoint_order;
  };
  hooks.checkpoint_wanted = [&] {
    if (w != 0) return false;
    const auto o = order();
    return o && o->step != checkpointed;
  };
  // Rank 0's evaluation of the average at a boundary; the final one goes with its last
  // report (after the loop's final counts).
  auto evaluate = [&](const CollectiveBoundary& b) {
    const models::EvalResult r =
        EvaluateOn(*eval_model, b.average, s.problem.EvalSet(b.final), s.problem.data.train);
    CollectiveEvaluation e;
    e.id = b.eval_id;
    e.full = b.final;
    e.samples = b.samples;
    // Every rank took b.step steps with the same pushes (the strategies push alike): the
    // pushes of all ranks (the coordinator records rounds, these / N).
    e.updates = loop.Snapshot().pushes * s.problem.plan.workers;
    e.loss_sum = r.loss_sum;
    e.correct = r.correct;
    e.count = r.count;
    e.consensus_distance = std::isfinite(b.consensus) ? b.consensus : 0.0;
    // The models, into the coordinator's run folder (shared, as for checkpoints).
    if (!registered.save_dir.empty()) {
      SaveBestModel(*eval_model, b.average, r.accuracy(), best_known.load(), registered.save_dir);
      raise_best(r.accuracy());
      if (b.final) SaveFinalModel(*eval_model, b.average, registered.save_dir);
    }
    if (b.final) {
      final_eval = e;
    } else if (!report(false, "", e)) {
      throw InputError(StrCat("worker ", w, ": the coordinator did not take the evaluation"));
    }
  };
  // Rank 0's checkpoint file: the average, its version the boundary's step.
  auto checkpoint = [&](const CollectiveBoundary& b) {
    const auto o = order();
    if (!o || o->step == checkpointed) return;
    ps::ShardSnapshot snap;
    snap.version = static_cast<uint64_t>(b.step);
    snap.values.assign(b.average.begin(), b.average.end());
    const CheckpointManifest::Shard entry =
        WriteShardFile(o->dir, 0, snap, s.problem.plan.strategy->name);
    CollectiveSaved saved;
    saved.shard = SavedShard{o->step, entry.file, entry.sha256, entry.version, entry.elements};
    saved.pushes = loop.Snapshot().pushes;
    checkpointed = o->step;
    if (!report(false, "", std::nullopt, saved)) {
      throw InputError(StrCat("worker ", w, ": the coordinator did not take the checkpoint"));
    }
  };
  hooks.boundary = [&](const CollectiveBoundary& b) {
    evaluated = std::max(evaluated, b.eval_id);
    if (b.rank != 0) return;
    // The evaluation first: the checkpoint's rows include it.
    if (b.final || b.evaluate) evaluate(b);
    if (b.checkpoint) checkpoint(b);
  };
  hooks.after_step = [&](const algorithms::StepResult& r, int64_t batch, int64_t) {
    std::lock_guard<std::mutex> lock(loss_mu);
    loss_sum += static_cast<double>(r.loss) * static_cast<double>(batch);
    loss_count += batch;
  };
  WorkerOutcome outcome;
  if (started) {
    try {
      const auto payload =
          col::Connect(co, col::NewFileRendezvous(registered.collective_dir + "/payload"));
      const auto control =
          col::Connect(co, col::NewFileRendezvous(registered.collective_dir + "/control"));
      outcome = RunCollectiveRank(loop, plan, s.config, w, *payload, *control, initial, hooks);
    } catch (const std::exception& e) {
      outcome.failure = StrCat("worker ", w, ": ", e.what());
    }
  }
  finished.store(true);
  reporter.join();
  std::string failure = outcome.failure;
  if (failure.empty() && !link_failure.empty()) failure = StrCat("worker ", w, ": ", link_failure);
  try {
    (void)report(true, failure, failure.empty() ? final_eval : std::nullopt);
  } catch (const std::exception& e) {
    ASGD_LOG(kWarning, "worker ", w, ": final report: ", e.what());
  }
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
