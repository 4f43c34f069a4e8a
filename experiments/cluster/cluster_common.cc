#include "experiments/cluster/cluster_common.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include <unistd.h>

#include "core/build_info.h"
#include "core/check.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/sha256.h"
#include "datasets/loader.h"
#include "datasets/partition.h"
#include "experiments/cluster/keys.h"
#include "experiments/config/setup.h"
#include "experiments/record/run_core.h"
#include "experiments/run/collective_runner.h"
#include "experiments/run/evaluation.h"
#include "models/factory.h"

namespace asgd::experiments::cluster {

namespace alg = ::asgd::algorithms;
namespace tp = ::asgd::transport;
using ::asgd::internal::StrCat;

milliseconds Ms(double seconds) {
  return milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000.0)));
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string PeerBoundsLine(int shard, const transport::ShardStats& s) {
  return StrCat("ps ", shard, " bounds: queued_reply_bytes=", s.queued_reply_bytes,
                " pinned_snapshots=", s.pinned_snapshots, " held_barriers=", s.held_barriers,
                " replies_dropped=", s.replies_dropped,
                " replies_over_budget=", s.replies_over_budget,
                " barriers_timed_out=", s.barriers_timed_out,
                " barriers_refused=", s.barriers_refused, " stops_refused=", s.stops_refused,
                " non_finite_refused=", s.errors_for(ps::ErrorCode::kNonFinite),
                " auth_refused=", s.auth_refused);
}

Duration WallClock::Now() const {
  return std::chrono::duration_cast<Duration>(std::chrono::system_clock::now().time_since_epoch());
}
void WallClock::SleepFor(Duration d) { std::this_thread::sleep_for(d); }

std::vector<float> Setup::Initial() const {
  AlignedVector<float> v(static_cast<std::size_t>(problem.model->layout().size()));
  problem.model->Initialize(v, DeriveSeed(problem.plan.seed, "init"));
  return {v.begin(), v.end()};
}

Setup MakeSetup(const Config& config, const RoleRequest& request, const std::string& role) {
  Setup s(config);
  s.spec = ResolveCluster(ClusterPlan::FromConfig(config), request, role);
  if (s.spec.coordinator.empty()) {
    throw ConfigError(ClusterPlan::kCoordinatorKey, "",
                      "the coordinator's address (host:port) for a training run across "
                      "processes (or a TF_CONFIG with a chief)");
  }
  if (s.spec.num_workers() == 0) {
    throw ConfigError(ClusterPlan::kWorkerKey, "", "at least one worker address");
  }
  const std::string name = config.String("algorithm.name");
  const alg::Strategy& strategy = alg::FindStrategy(name);
  if (strategy.family == alg::Family::kSequential) {
    throw ConfigError("algorithm.name", name,
                      "a distributed strategy: the sequential baseline runs with `asgd run`");
  }
  RefuseCollectiveRole(s.config, role);
  if (strategy.shared_memory) {
    throw ConfigError("algorithm.name", name,
                      "a strategy over the parameter server: hogwild shares one vector inside "
                      "one process (across processes its rule is async_sgd)");
  }
  const int workers = s.spec.num_workers();
  if (s.config.Int("algorithm.workers") != workers) {
    ASGD_LOG(kInfo, "algorithm.workers = ", workers, " (the cluster's worker count)");
    s.config.Set("algorithm.workers", std::to_string(workers));
  }
  // Validates the server options before the data is read.
  if (strategy.server_rule) (void)strategy.server_rule(BuildStrategyOptions(s.config, 0), 0);
  // A collective's worker rule likewise (dpsgd's workers and topology, local_sgd's window).
  if (strategy.family == alg::Family::kGroup)
    (void)strategy.worker_rule(BuildStrategyOptions(s.config, 0));
  // The plan (the config resolved, typed), the data, the evaluator's model on the CPU, the
  // options checked against the data, the workers' partitions: as in `asgd run`.
  RunRequest run_request;
  run_request.data_dirs = request.data_dirs;
  s.problem = LoadProblem(s.config, run_request);
  s.placement =
      ps::Placement::Build(s.problem.model->layout(), s.spec.num_ps(), s.problem.plan.placement);
  s.timeout = Ms(s.cluster().timeout_s);
  s.report_interval = Ms(s.cluster().report_interval_s);
  s.heartbeat_timeout = Ms(s.cluster().heartbeat_timeout_s);
  s.curve = CurveFromPlan(s.cluster(), /*serves=*/role == "ps" || role == "coordinator");
  return s;
}

std::unique_ptr<WorkerTiming> WorkerTiming::Attach(const Setup& setup, int w, WorkerSetup& ws) {
  auto t = std::make_unique<WorkerTiming>();
  t->clock = NewSystemClock();
  ws.clock = t->clock.get();
  if (setup.problem.plan.delay) {
    t->delay =
        std::make_unique<sim::DelayModel>(setup.problem.plan.sim.delay, setup.problem.plan.workers,
                                          DeriveSeed(setup.problem.plan.seed, "delay"));
    ws.after_gradient = InjectedDelay(t->delay.get(), t->clock.get(), w);
  }
  return t;
}

void LossSinceReport::Add(double loss, int64_t batch) {
  std::lock_guard<std::mutex> lock(mu_);
  sum_ += loss * static_cast<double>(batch);
  count_ += batch;
}

void LossSinceReport::TakeInto(WorkerReport& report) {
  std::lock_guard<std::mutex> lock(mu_);
  report.loss_sum = sum_;
  report.loss_count = count_;
  sum_ = 0;
  count_ = 0;
}

std::string FinishWorker(int w, const std::string& loop_failure, std::atomic<bool>& finished,
                         std::thread& reporter, const std::string& link_failure,
                         const std::function<void(const std::string& failure)>& final_report) {
  finished.store(true);
  reporter.join();
  std::string failure = loop_failure;
  if (failure.empty() && !link_failure.empty()) failure = StrCat("worker ", w, ": ", link_failure);
  try {
    final_report(failure);
  } catch (const std::exception& e) {
    ASGD_LOG(kWarning, "worker ", w, ": final report: ", e.what());
  }
  return failure;
}

// ---- the link to the coordinator -------------------------------------------------

CoordinatorLink::CoordinatorLink(std::shared_ptr<tp::Context> context, const Setup& setup,
                                 std::string role, int task)
    : client_(std::move(context), setup.CoordinatorAddress(),
              tp::ControlOptions{.curve = setup.curve}),
      client_address_(setup.CoordinatorAddress()),
      role_(std::move(role)),
      task_(task),
      interval_(setup.report_interval),
      patience_(std::max(setup.timeout, setup.heartbeat_timeout)) {}

RegisterReply CoordinatorLink::Register() {
  RegisterRequest msg;
  msg.role = role_;
  msg.task = task_;
  msg.pid = static_cast<int64_t>(::getpid());
  msg.host = HostName();
  const std::string bytes = Encode(msg);
  const auto deadline = Steady::now() + patience_;
  while (Steady::now() < deadline) {
    if (auto reply = Send<RegisterReply>(bytes, std::max(interval_, milliseconds(500)))) {
      return *reply;
    }
  }
  throw InputError(StrCat(role_, " ", task_, ": no coordinator answered at ", client_address_,
                          " within ", patience_.count() / 1000, " s"));
}

std::optional<WorkerReply> CoordinatorLink::Report(const WorkerReport& report,
                                                   milliseconds timeout) {
  return Send<WorkerReply>(Encode(report), timeout);
}
std::optional<PsReply> CoordinatorLink::Report(const PsReport& report, milliseconds timeout) {
  return Send<PsReply>(Encode(report), timeout);
}
std::optional<EvaluatorReply> CoordinatorLink::Report(const EvaluatorReport& report,
                                                      milliseconds timeout) {
  return Send<EvaluatorReply>(Encode(report), timeout);
}

template <typename Reply>
std::optional<Reply> CoordinatorLink::Send(const std::string& bytes, milliseconds timeout) {
  auto answer = client_.Request(bytes, timeout);
  if (!answer) return std::nullopt;
  Reply reply;
  const ControlError e = DecodeReply(*answer, &reply);
  if (!e.ok()) {
    // A refusal says so itself; anything else is a reply this process cannot read.
    throw InputError(StrCat(
        role_, " ", task_, ": ",
        e.refused() ? e.message() : "the coordinator sent a malformed reply: " + e.message()));
  }
  last_answer_ = Steady::now();
  return reply;
}

std::unique_ptr<models::Model> WorkerDeviceModel(const Setup& s, int w) {
  const models::Device device = s.problem.plan.WorkerDevice(w);
  if (!device.is_cuda()) return nullptr;
  auto model = models::NewModelOn(s.problem.plan.model, InputSpecFor(s.problem.data.train), device);
  ASGD_LOG(kInfo, "worker ", w, ": ", model->Describe());
  return model;
}

WorkerSetup WorkerSetupFor(const Setup& s, int w, const models::Model* device_model) {
  WorkerSetup ws = MakeWorkerSetup(s.problem, w);
  if (device_model != nullptr) ws.model = device_model;
  return ws;
}

bool AwaitStart(const BlockedStopSignals& signals, const CoordinatorLink& link, int worker,
                const std::atomic<bool>& stop,
                const std::function<std::optional<WorkerReply>()>& report) {
  for (;;) {
    const auto reply = report();
    if (reply && reply->start) return true;
    if (stop.load()) return false;
    if (!reply && link.Lost())
      throw InputError(StrCat("worker ", worker, ": the coordinator stopped answering"));
    if (signals.Wait(link.interval())) throw InputError(StrCat("worker ", worker, ": interrupted"));
  }
}

void ReportUntilFinished(const BlockedStopSignals& signals, const CoordinatorLink& link,
                         const std::atomic<bool>& finished, std::atomic<bool>& stop,
                         std::string& failure, const std::function<bool()>& report) {
  while (!finished.load()) {
    if (const int sig = signals.Wait(link.interval())) {
      failure = StopPolicy::SignalReason(sig);
      stop.store(true);
      return;
    }
    if (finished.load()) return;
    try {
      if (!report() && link.Lost()) {
        failure = "the coordinator stopped answering";
        stop.store(true);
      }
    } catch (const std::exception& e) {
      failure = e.what();
      stop.store(true);
    }
  }
}

ps::ShardCheckpoint ReadRestoreOrder(const RestoreOrder& order) {
  const std::string bytes = ReadFile(order.file);
  if (Sha256Hex(bytes) != order.sha256) {
    throw DataError(order.file, "SHA-256 differs from the checkpoint manifest's");
  }
  return ps::DecodeShardCheckpoint(bytes, order.file);
}

// ---- evaluating the centre -------------------------------------------------------

CentreEvaluator::CentreEvaluator(std::shared_ptr<tp::Context> context, const Setup& setup)
    : setup_(setup),
      model_(setup.problem.model->Clone()),
      centre_(static_cast<std::size_t>(setup.problem.model->layout().size())) {
  tp::ClientOptions co;
  co.role = ps::Role::kEvaluator;
  co.id = static_cast<uint32_t>(setup.problem.plan.workers);
  co.timeout = setup.timeout;
  co.curve = setup.curve;
  // It only pulls; the same options as the workers'.
  co.chunk_bytes = setup.problem.plan.chunk_bytes;
  client_ = tp::PsClient::FromCluster(std::move(context), setup.spec, setup.placement, co);
}

ps::Status CentreEvaluator::WaitForServers() { return client_->WaitForServers(setup_.timeout); }

std::optional<models::EvalResult> CentreEvaluator::Evaluate(bool full) {
  const ps::Status st = client_->PullAndWait(centre_);
  if (st.code() == ps::StatusCode::kTimeout) {
    ASGD_LOG(kWarning, "evaluator: reading the centre: ", st.ToString());
    return std::nullopt;
  }
  if (!st.ok()) throw InputError("evaluator: reading the centre: " + st.ToString());
  const datasets::TrainTest& data = setup_.problem.data;
  return EvaluateOn(*model_, centre_, setup_.problem.EvalSet(full), data.train);
}

void CentreEvaluator::SaveFinal(const std::string& run_dir) const {
  SaveFinalModel(*model_, centre_, run_dir);
}

void CentreEvaluator::SaveBest(double accuracy, double best_before,
                               const std::string& run_dir) const {
  SaveBestModel(*model_, centre_, accuracy, best_before, run_dir);
}

}  // namespace asgd::experiments::cluster
