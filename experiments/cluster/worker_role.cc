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

namespace {

// This worker's client of the shard servers, once they all answer. Throws InputError
// ("worker W: the shard servers: ...") when they do not within cluster.timeout_s.
std::unique_ptr<tp::PsParamClient> ConnectToShards(const cluster::Setup& s,
                                                   std::shared_ptr<tp::Context> context, int w) {
  tp::ClientOptions co;
  co.id = static_cast<uint32_t>(w);
  co.timeout = s.timeout;
  co.curve = s.curve;
  co.chunk_bytes = s.problem.plan.chunk_bytes;
  auto ps_client = std::make_unique<tp::PsParamClient>(
      tp::PsClient::FromCluster(std::move(context), s.spec, s.placement, co));
  const ps::Status servers = ps_client->client().WaitForServers(s.timeout);
  if (!servers.ok())
    throw InputError(StrCat("worker ", w, ": the shard servers: ", servers.ToString()));
  return ps_client;
}

// What a worker's reports share between the training thread and the reporter: the
// coordinator's stop, the run's samples and this worker's budget as the last reply said,
// and the loss since the last report.
class WorkerReporting {
 public:
  WorkerReporting(const cluster::Setup& s, int w, cluster::CoordinatorLink& link,
                  const WorkerLoop& loop)
      : s_(s), w_(w), link_(link), loop_(loop) {}

  // One report; nullopt when the coordinator did not answer in time.
  std::optional<WorkerReply> Report(bool done, const std::string& failure) {
    WorkerReport body;
    body.task = w_;
    body.metrics = loop_.Snapshot();
    body.done = done;
    body.failure = failure;
    losses_.TakeInto(body);
    const int64_t own = loop_.Snapshot().samples;
    std::lock_guard<std::mutex> lock(link_mu_);
    auto reply = link_.Report(body, s_.timeout);
    if (reply) {
      global_samples_.store(reply->samples);
      samples_at_report_.store(own);
      sample_budget_.store(reply->sample_budget);
      step_budget_.store(reply->step_budget);
      if (reply->stop) stop_.store(true);
    }
    return reply;
  }

  // The loop's hooks: the budget the coordinator grants, the learning rate from the run's
  // samples, the pause while a lost shard restarts, the losses.
  WorkerHooks Hooks();

  std::atomic<bool>& stop() { return stop_; }

 private:
  bool Exhausted() const {
    const WorkerMetrics m = loop_.Snapshot();
    return m.samples >= sample_budget_.load() ||
           (step_budget_.load() >= 0 && m.steps >= step_budget_.load());
  }
  bool BeforeStep(double* lr_scale);
  bool Recover(const ps::Status& st);

  const cluster::Setup& s_;
  const int w_;
  cluster::CoordinatorLink& link_;
  const WorkerLoop& loop_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> global_samples_{0}, samples_at_report_{0};
  std::atomic<int64_t> sample_budget_{0}, step_budget_{-1};
  std::mutex link_mu_;  // the reporter thread and the training loop both report
  cluster::LossSinceReport losses_;
};

bool WorkerReporting::BeforeStep(double* lr_scale) {
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
// applied: ps/message.h, "Chunked pushes"): wait while the coordinator pauses the
// run for the shard's restart, then go on from a fresh read of the centre. The push is
// not sent again (it may have been applied when it timed out).
bool WorkerReporting::Recover(const ps::Status& st) {
  const bool incomplete = st.code() == ps::StatusCode::kRemoteError &&
                          st.error_code() == ps::ErrorCode::kIncompletePush;
  if (st.code() != ps::StatusCode::kTimeout && st.code() != ps::StatusCode::kAborted &&
      !incomplete)
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

WorkerHooks WorkerReporting::Hooks() {
  WorkerHooks hooks;
  hooks.before_step = [this](double* lr_scale) { return BeforeStep(lr_scale); };
  hooks.recover = [this](const ps::Status& st) { return Recover(st); };
  hooks.after_step = [this](const alg::StepResult& r, int64_t batch) {
    losses_.Add(static_cast<double>(r.loss), batch);
  };
  hooks.ending = [this] { return stop_.load(); };
  return hooks;
}

}  // namespace

int RunTrainingWorkerRole(const Config& config, const RoleRequest& request, std::ostream& out) {
  cluster::Setup s = cluster::MakeSetup(config, request, "worker");
  if (s.problem.plan.family == algorithms::Family::kGroup) return RunCollectiveWorkerRole(s, out);
  const int w = s.spec.task_index;
  BlockedStopSignals signals;  // a worker stops when the coordinator says so
  // The worker's model on its device (model.device), before registering: a device this
  // process cannot use is a ConfigError here, not a failure after the run started.
  const std::unique_ptr<models::Model> device_model = cluster::WorkerDeviceModel(s, w);
  auto context = tp::NewContext();
  cluster::CoordinatorLink link(context, s, "worker", w);
  link.Register();
  const auto ps_client = ConnectToShards(s, context, w);

  WorkerSetup ws = cluster::WorkerSetupFor(s, w, device_model.get());
  const auto timing = cluster::WorkerTiming::Attach(s, w, ws);
  WorkerLoop loop(std::move(ws));

  WorkerReporting reporting(s, w, link, loop);
  std::atomic<bool> finished{false};
  std::string link_failure;
  // Wait for the coordinator's go (every worker and shard registered, initial evaluation
  // done), reporting as the heartbeat.
  (void)cluster::AwaitStart(signals, link, w, reporting.stop(),
                            [&] { return reporting.Report(false, ""); });
  std::thread reporter([&] {
    cluster::ReportUntilFinished(signals, link, finished, reporting.stop(), link_failure,
                                 [&] { return reporting.Report(false, "").has_value(); });
  });
  const WorkerOutcome outcome = loop.Run(*ps_client, reporting.Hooks());
  const std::string failure =
      cluster::FinishWorker(w, outcome.failure, finished, reporter, link_failure,
                            [&](const std::string& f) { (void)reporting.Report(true, f); });
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
