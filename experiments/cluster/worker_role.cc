// A worker of a multi-process training run (cluster_run.h).
#include <atomic>
#include <mutex>
#include <optional>
#include <ostream>
#include <thread>

#include "algorithms/schedule.h"
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
#include "experiments/record/run_core.h"
#include "experiments/run/worker_loop.h"
#include "models/factory.h"
#include "transport/ps_param_client.h"

namespace asgd::experiments {

namespace alg = ::asgd::algorithms;
namespace tp = ::asgd::transport;
using ::asgd::internal::StrCat;

int RunTrainingWorkerRole(const Config& config, const RoleRequest& request, std::ostream& out) {
  cluster::Setup s = cluster::MakeSetup(config, request, "worker");
  if (s.problem.plan.strategy->collective) return RunCollectiveWorkerRole(s, out);
  const int w = s.spec.task_index;
  BlockedStopSignals signals;  // a worker stops when the coordinator says so
  // The worker's model on its device (model.device), before registering: a device this
  // process cannot use is a ConfigError here, not a failure after the run started.
  const std::unique_ptr<models::Model> device_model = cluster::WorkerDeviceModel(s, w);
  auto context = tp::NewContext();
  cluster::CoordinatorLink link(context, s, "worker", w);
  link.Register();

  tp::ClientOptions co;
  co.id = static_cast<uint32_t>(w);
  co.timeout = s.timeout;
  co.curve = s.curve;
  co.chunk_bytes = s.problem.plan.chunk_bytes;
  auto ps_client = std::make_unique<tp::PsParamClient>(
      tp::PsClient::FromCluster(context, s.spec, s.placement, co));
  const ps::Status servers = ps_client->client().WaitForServers(s.timeout);
  if (!servers.ok())
    throw InputError(StrCat("worker ", w, ": the shard servers: ", servers.ToString()));

  WorkerSetup ws = cluster::WorkerSetupFor(s, w, device_model.get());
  auto clock = NewSystemClock();
  ws.clock = clock.get();
  // The [delay] model as injected sleeps (as in the thread runner; the same seed, so every
  // process agrees on the stragglers).
  std::unique_ptr<sim::DelayModel> delay;
  if (HasDelayModel(s.config)) {
    delay =
        std::make_unique<sim::DelayModel>(BuildSimOptions(s.config).delay, s.problem.plan.workers,
                                          DeriveSeed(s.problem.plan.seed, "delay"));
    ws.after_gradient = InjectedDelay(delay.get(), clock.get(), w);
  }
  WorkerLoop loop(std::move(ws));

  std::atomic<bool> stop{false}, finished{false};
  std::atomic<int64_t> global_samples{0}, samples_at_report{0};
  std::atomic<int64_t> sample_budget{0}, step_budget{-1};
  std::mutex link_mu;  // the reporter thread and the training loop both report
  std::mutex loss_mu;
  double loss_sum = 0;
  int64_t loss_count = 0;
  std::string link_failure;
  auto report = [&](bool done, const std::string& failure) -> std::optional<WorkerReply> {
    WorkerReport body;
    body.task = w;
    body.metrics = loop.Snapshot();
    body.done = done;
    body.failure = failure;
    {
      std::lock_guard<std::mutex> lock(loss_mu);
      body.loss_sum = loss_sum;
      body.loss_count = loss_count;
      loss_sum = 0;
      loss_count = 0;
    }
    const int64_t own = loop.Snapshot().samples;
    std::lock_guard<std::mutex> lock(link_mu);
    auto reply = link.Report(body, s.timeout);
    if (reply) {
      global_samples.store(reply->samples);
      samples_at_report.store(own);
      sample_budget.store(reply->sample_budget);
      step_budget.store(reply->step_budget);
      if (reply->stop) stop.store(true);
    }
    return reply;
  };
  // Wait for the coordinator's go (every worker and shard registered, initial evaluation
  // done), reporting as the heartbeat.
  (void)cluster::AwaitStart(signals, link, w, stop, [&] { return report(false, ""); });
  std::thread reporter([&] {
    cluster::ReportUntilFinished(signals, link, finished, stop, link_failure,
                                 [&] { return report(false, "").has_value(); });
  });
  const double train_size = static_cast<double>(s.problem.data.train.num_examples);
  WorkerHooks hooks;
  auto exhausted = [&] {
    const WorkerMetrics m = loop.Snapshot();
    return m.samples >= sample_budget.load() ||
           (step_budget.load() >= 0 && m.steps >= step_budget.load());
  };
  hooks.before_step = [&](double* lr_scale) {
    // Out of budget: ask the coordinator for more (or to stop) before the next step.
    while (!stop.load() && exhausted()) {
      if (!report(false, "")) {
        if (link.Lost()) return false;
        continue;
      }
      if (!stop.load() && exhausted()) std::this_thread::sleep_for(link.interval());
    }
    if (stop.load(std::memory_order_relaxed)) return false;
    // The run's samples as of the last report, plus this worker's since.
    const int64_t estimate =
        global_samples.load() + loop.Snapshot().samples - samples_at_report.load();
    *lr_scale =
        alg::LearningRateScale(s.problem.schedule, static_cast<double>(estimate) / train_size);
    return true;
  };
  // A request that timed out (a shard died), or a chunked push whose first chunks went to
  // the dead shard and whose rest reached its restarted successor (refused whole, nothing
  // applied: ps/message.h, "Chunked pushes"): wait while the coordinator pauses the
  // run for the shard's restart, then go on from a fresh read of the centre. The push is
  // not sent again (it may have been applied when it timed out).
  hooks.recover = [&](const ps::Status& st) {
    const bool incomplete = st.code() == ps::StatusCode::kRemoteError &&
                            st.error_code() == ps::ErrorCode::kIncompletePush;
    if (st.code() != ps::StatusCode::kTimeout && st.code() != ps::StatusCode::kAborted &&
        !incomplete)
      return false;
    ASGD_LOG(kWarning, "worker ", w, ": ", st.ToString(),
             "; asking the coordinator whether to go on");
    for (;;) {
      if (stop.load()) return false;
      auto reply = report(false, "");
      if (!reply) {
        if (link.Lost()) return false;
        continue;
      }
      if (!reply->paused) return !stop.load();
      std::this_thread::sleep_for(link.interval());
    }
  };
  hooks.after_step = [&](const alg::StepResult& r, int64_t batch) {
    std::lock_guard<std::mutex> lock(loss_mu);
    loss_sum += static_cast<double>(r.loss) * static_cast<double>(batch);
    loss_count += batch;
  };
  hooks.ending = [&] { return stop.load(); };
  const WorkerOutcome outcome = loop.Run(*ps_client, hooks);
  finished.store(true);
  reporter.join();
  std::string failure = outcome.failure;
  if (failure.empty() && !link_failure.empty()) failure = StrCat("worker ", w, ": ", link_failure);
  try {
    (void)report(true, failure);
  } catch (const std::exception& e) {
    ASGD_LOG(kWarning, "worker ", w, ": final report: ", e.what());
  }
  const WorkerMetrics m = loop.Snapshot();
  if (!failure.empty()) {
    out << "worker " << w << ": " << failure << std::endl;
    return kExitBadInput;
  }
  out << "worker " << w << ": " << m.steps << " steps, " << m.samples << " samples, " << m.pushes
      << " pushes" << std::endl;
  return kExitOk;
}

}  // namespace asgd::experiments
