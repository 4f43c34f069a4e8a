#include "experiments/cluster_run.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <thread>

#include "algorithms/schedule.h"
#include "algorithms/strategy.h"
#include "core/aligned.h"
#include "core/build_info.h"
#include "core/check.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/sha256.h"
#include "core/log.h"
#include "core/rng.h"
#include "datasets/loader.h"
#include "datasets/partition.h"
#include "experiments/checkpoint.h"
#include "experiments/cli.h"
#include "experiments/csv.h"
#include "experiments/evaluation.h"
#include "experiments/keys.h"
#include "experiments/metrics.h"
#include "experiments/progress.h"
#include "experiments/ps_param_client.h"
#include "experiments/run_dir.h"
#include "experiments/setup.h"
#include "experiments/signals.h"
#include "experiments/worker_loop.h"
#include "models/factory.h"
#include "transport/checkpoint.h"
#include "transport/context.h"
#include "transport/control.h"
#include "transport/placement.h"
#include "transport/ps_client.h"
#include "transport/shard_server.h"

namespace asgd::experiments {
namespace {

namespace alg = ::asgd::algorithms;
namespace tp = ::asgd::transport;
using json = nlohmann::json;
using ::asgd::internal::StrCat;
using Steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

const std::vector<std::string> kConvergenceColumns = {
    "time_s",    "epoch",     "samples",       "updates",       "train_loss",
    "test_loss", "test_accuracy", "eval_examples", "learning_rate"};

milliseconds Ms(double seconds) {
  return milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000.0)));
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Wall-clock time (seconds since the Unix epoch), for staleness records made in one
// process and placed on the coordinator's time axis in another.
class WallClock final : public Clock {
 public:
  Duration Now() const override {
    return std::chrono::duration_cast<Duration>(std::chrono::system_clock::now().time_since_epoch());
  }
  void SleepFor(Duration d) override { std::this_thread::sleep_for(d); }
};

// ---- What every process of the run derives from the config --------------------------

struct Setup {
  explicit Setup(const Config& c) : config(c) {}
  Config config;  // algorithm.workers set to the cluster's worker count
  tp::ClusterSpec spec;
  datasets::TrainTest data;
  std::unique_ptr<models::Model> model;
  tp::Placement placement;
  const alg::Strategy* strategy = nullptr;
  alg::StrategyOptions options;
  alg::ScheduleOptions schedule;
  alg::OptimizerOptions optimizer;
  uint64_t seed = 0;
  int workers = 0;
  milliseconds timeout{60000}, report_interval{100}, heartbeat_timeout{10000};
  tp::CurveOptions curve;  // cluster.curve: this process's keys (experiments/keys.h)

  std::vector<float> Initial() const {
    AlignedVector<float> v(static_cast<std::size_t>(model->layout().size()));
    model->Initialize(v, DeriveSeed(seed, "init"));
    return {v.begin(), v.end()};
  }
  std::string CoordinatorAddress() const { return spec.CoordinatorAddress(); }
};

Setup MakeSetup(const Config& config, const RoleRequest& request, const std::string& role) {
  Setup s(config);
  s.spec = ResolveCluster(config, request, role);
  if (s.spec.coordinator.empty()) {
    throw ConfigError("cluster.coordinator", "",
                      "the coordinator's address (host:port) for a training run across "
                      "processes (or a TF_CONFIG with a chief)");
  }
  if (s.spec.num_workers() == 0) {
    throw ConfigError("cluster.worker", "", "at least one worker address");
  }
  const std::string name = config.String("algorithm.name");
  if (name == "sgd") {
    throw ConfigError("algorithm.name", name,
                      "a distributed strategy: the sequential baseline runs with `asgd run`");
  }
  s.strategy = &alg::FindStrategy(name);
  if (s.strategy->shared_memory) {
    throw ConfigError("algorithm.name", name,
                      "a strategy over the parameter server: hogwild shares one vector inside "
                      "one process (across processes its rule is async_sgd)");
  }
  s.workers = s.spec.num_workers();
  if (s.config.Int("algorithm.workers") != s.workers) {
    ASGD_LOG(kInfo, "algorithm.workers = ", s.workers, " (the cluster's worker count)");
    s.config.Set("algorithm.workers", std::to_string(s.workers));
  }
  s.seed = static_cast<uint64_t>(s.config.Int("experiment.seed"));
  s.timeout = Ms(s.config.Double("cluster.timeout_s"));
  s.report_interval = Ms(s.config.Double("cluster.report_interval_s"));
  s.heartbeat_timeout = Ms(s.config.Double("cluster.heartbeat_timeout_s"));
  s.options = BuildStrategyOptions(s.config);
  (void)s.strategy->server_rule(s.options, 0);  // validates the server options
  CheckWorkerDevices(s.config, s.workers);  // syntax only: workers resolve their own

  s.schedule = BuildScheduleOptions(s.config);
  s.optimizer = BuildOptimizerOptions(s.config);
  s.data = datasets::LoadDataset(BuildDataOptions(s.config, request.data_dirs));
  s.model = models::NewModel(BuildModelOptions(s.config), InputSpecFor(s.data.train));
  (void)alg::NewOptimizer(s.optimizer, s.model->layout().size());  // validates
  tp::PlacementOptions po;
  po.policy = tp::ParsePlacementPolicy(s.config.String("cluster.placement"));
  s.placement = tp::Placement::Build(s.model->layout(), s.spec.num_ps(), po);
  s.curve = CurveFromConfig(s.config, /*serves=*/role == "ps" || role == "coordinator");
  return s;
}

// ---- JSON fields, checked (a peer's message is input, not trusted) ----------------

const json& Field(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) throw InputError(StrCat("message without \"", key, "\""));
  return j.at(key);
}
int64_t Int(const json& j, const char* key) {
  const json& v = Field(j, key);
  if (!v.is_number_integer()) throw InputError(StrCat("\"", key, "\" is not an integer"));
  return v.get<int64_t>();
}
double Num(const json& j, const char* key) {
  const json& v = Field(j, key);
  if (!v.is_number()) throw InputError(StrCat("\"", key, "\" is not a number"));
  return v.get<double>();
}
std::string Str(const json& j, const char* key) {
  const json& v = Field(j, key);
  if (!v.is_string()) throw InputError(StrCat("\"", key, "\" is not a string"));
  return v.get<std::string>();
}
bool Bool(const json& j, const char* key, bool otherwise = false) {
  if (!j.is_object() || !j.contains(key)) return otherwise;
  const json& v = j.at(key);
  if (!v.is_boolean()) throw InputError(StrCat("\"", key, "\" is not a boolean"));
  return v.get<bool>();
}

json MetricsJson(const WorkerMetrics& m) {
  return {{"steps", m.steps},         {"samples", m.samples},         {"pushes", m.pushes},
          {"active_s", m.active_s},   {"compute_s", m.compute_s},     {"wait_s", m.wait_s},
          {"bytes_pushed", m.bytes_pushed}, {"bytes_pulled", m.bytes_pulled},
          {"dropped", m.dropped_pushes}};
}
WorkerMetrics MetricsFrom(const json& j, int worker) {
  WorkerMetrics m;
  m.worker = worker;
  m.steps = Int(j, "steps");
  m.samples = Int(j, "samples");
  m.pushes = Int(j, "pushes");
  m.active_s = Num(j, "active_s");
  m.compute_s = Num(j, "compute_s");
  m.wait_s = Num(j, "wait_s");
  m.bytes_pushed = Int(j, "bytes_pushed");
  m.bytes_pulled = Int(j, "bytes_pulled");
  m.dropped_pushes = Int(j, "dropped");
  if (m.steps < 0 || m.samples < 0 || m.pushes < 0) throw InputError("negative worker metrics");
  return m;
}

// A role's link to the coordinator: registration, then reports; replies are JSON.
class CoordinatorLink {
 public:
  CoordinatorLink(std::shared_ptr<tp::Context> context, const Setup& setup, std::string role, int task)
      : client_(std::move(context), setup.CoordinatorAddress(),
                tp::ControlOptions{.curve = setup.curve}),
        client_address_(setup.CoordinatorAddress()),
        role_(std::move(role)),
        task_(task),
        interval_(setup.report_interval),
        patience_(std::max(setup.timeout, setup.heartbeat_timeout)) {}

  // Registers, retrying until the coordinator answers (it may start later) or the
  // run's timeout passes. Throws InputError if it refuses or never answers.
  json Register() {
    json msg = {{"type", "register"}, {"role", role_}, {"task", task_},
                {"pid", static_cast<int64_t>(::getpid())}, {"host", HostName()}};
    const auto deadline = Steady::now() + patience_;
    while (Steady::now() < deadline) {
      if (auto reply = Send(msg, std::max(interval_, milliseconds(500)))) return *reply;
    }
    throw InputError(StrCat(role_, " ", task_, ": no coordinator answered at ",
                            client_address_, " within ", patience_.count() / 1000, " s"));
  }
  // One report; nullopt if the coordinator did not answer in time.
  std::optional<json> Report(json body, milliseconds timeout) {
    body["type"] = "report";
    return Send(body, timeout);
  }
  // True when the coordinator has not answered for longer than the run allows.
  bool Lost() const { return Steady::now() - last_answer_ > patience_; }
  milliseconds interval() const { return interval_; }

 private:
  std::optional<json> Send(json msg, milliseconds timeout) {
    msg["role"] = role_;
    msg["task"] = task_;
    auto text = client_.Request(msg.dump(), timeout);
    if (!text) return std::nullopt;
    json reply = json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (reply.is_discarded() || !reply.is_object()) {
      throw InputError(StrCat(role_, " ", task_, ": the coordinator sent a malformed reply"));
    }
    if (reply.contains("error")) {
      throw InputError(StrCat(role_, " ", task_, ": the coordinator refused: ",
                              reply["error"].is_string() ? reply["error"].get<std::string>() : "?"));
    }
    last_answer_ = Steady::now();
    return reply;
  }

  tp::ControlClient client_;
  std::string client_address_;
  std::string role_;
  int task_;
  milliseconds interval_;
  milliseconds patience_;
  Steady::time_point last_answer_ = Steady::now();
};

// Pulls the centre and evaluates it (the evaluator role, or the coordinator itself).
class CentreEvaluator {
 public:
  CentreEvaluator(std::shared_ptr<tp::Context> context, const Setup& setup)
      : setup_(setup), model_(setup.model->Clone()), centre_(static_cast<std::size_t>(
                                                           setup.model->layout().size())) {
    tp::ClientOptions co;
    co.role = tp::Role::kEvaluator;
    co.id = static_cast<uint32_t>(setup.workers);
    co.timeout = setup.timeout;
    co.curve = setup.curve;
    client_ = tp::PsClient::FromCluster(std::move(context), setup.spec, setup.placement, co);
  }
  tp::Status WaitForServers() { return client_->WaitForServers(setup_.timeout); }
  // Evaluates on the whole test set (full) or metrics.eval_examples of it; nullopt when
  // reading the centre timed out (a shard is down: the evaluation is retried or dropped).
  std::optional<models::EvalResult> Evaluate(bool full) {
    const tp::Status st = client_->PullAndWait(centre_);
    if (st.code() == tp::StatusCode::kTimeout) {
      ASGD_LOG(kWarning, "evaluator: reading the centre: ", st.ToString());
      return std::nullopt;
    }
    if (!st.ok()) throw InputError("evaluator: reading the centre: " + st.ToString());
    return EvaluateOn(*model_, centre_, setup_.data.test,
                      full ? 0 : setup_.config.Int("metrics.eval_examples"));
  }

 private:
  const Setup& setup_;
  std::unique_ptr<models::Model> model_;
  AlignedVector<float> centre_;
  std::unique_ptr<tp::PsClient> client_;
};

}  // namespace

// ===================================== coordinator =====================================

namespace {

class Coordinator {
 public:
  Coordinator(Setup& setup, const RoleRequest& request, std::ostream& out)
      : s_(setup), request_(request), out_(out) {}

  int Run() {
    BlockedStopSignals signals;  // before the ZeroMQ context starts its threads
    context_ = tp::NewContext();
    const std::string bind = s_.spec.CoordinatorBindAddress(s_.config.String("cluster.bind_host"));
    server_ = std::make_unique<tp::ControlServer>(context_, bind,
                                                  tp::ControlOptions{.curve = s_.curve});
    Expect();
    const bool resuming = !request_.resume_dir.empty();
    if (resuming) {
      // The newest valid checkpoint, verified before anything is touched; every shard
      // restores its range from it when it registers (Handle), workers start from there.
      LoadedCheckpoint c = LoadNewestCheckpoint(request_.resume_dir, TrainingConfigHash(s_.config));
      if (static_cast<int>(c.manifest.shards.size()) != s_.spec.num_ps()) {
        throw DataError(c.dir, StrCat("holds ", c.manifest.shards.size(), " shards, the run has ",
                                      s_.spec.num_ps()));
      }
      run_ = std::make_unique<RunDir>(RunDir::Resume(request_.resume_dir, request_.command_line));
      TruncateCsv(run_->File("convergence.csv"), c.manifest.convergence_rows);
      // Each shard saved itself a little after the checkpoint was asked for: staleness.csv
      // keeps exactly the rows of the pushes the saved shards hold (while every push has
      // its row: below metrics.staleness_rows), else the rows counted at the request.
      if (c.manifest.staleness_rows < s_.config.Int("metrics.staleness_rows")) {
        std::vector<uint64_t> versions;
        for (const auto& shard : c.manifest.shards) versions.push_back(shard.version);
        const KeptStaleness kept = FilterStalenessCsv(run_->File("staleness.csv"), versions);
        c.manifest.staleness_rows = kept.rows;
        c.manifest.staleness_histogram = kept.histogram;
        if (!s_.strategy->synchronous) {
          // Asynchronous: a push is one row per shard, so the rows count each worker's
          // pushes that the model holds.
          for (auto& w : c.manifest.workers) {
            int64_t records = 0;
            const auto it = kept.histogram.find(static_cast<uint32_t>(w.worker));
            if (it != kept.histogram.end()) {
              for (const auto& entry : it->second) records += entry.second;
            }
            w.pushes = records / s_.spec.num_ps();
          }
        }
      } else {
        TruncateCsv(run_->File("staleness.csv"), c.manifest.staleness_rows);
      }
      resume_ = c.manifest;
      last_complete_ = c.manifest;
      last_complete_dir_ = c.dir;
      time_base_ = c.manifest.time_s;
      for (std::size_t w = 0; w < workers_.size() && w < c.manifest.workers.size(); ++w) {
        retired_[w] = c.manifest.workers[w];
      }
      best_accuracy_ = c.manifest.best_test_accuracy;
      time_to_target_ = c.manifest.time_to_target_s;
      last_ckpt_step_ = c.manifest.step;
      out_ << "coordinator: resuming " << run_->id() << " from " << c.dir << " (update "
           << c.manifest.step << ")" << std::endl;
    } else {
      run_ = std::make_unique<RunDir>(RunDir::Create(s_.config, request_.name, request_.command_line));
    }
    convergence_file_ = resuming ? run_->OpenAppend("convergence.csv") : run_->Open("convergence.csv");
    convergence_ = std::make_unique<CsvWriter>(*convergence_file_, kConvergenceColumns, !resuming);
    staleness_file_ = resuming ? run_->OpenAppend("staleness.csv") : run_->Open("staleness.csv");
    staleness_ = std::make_unique<StalenessRecorder>(
        staleness_file_.get(), s_.config.Int("metrics.staleness_rows"), time_base_,
        resuming ? resume_->staleness_rows : -1);
    if (resume_) {
      for (const auto& [worker, counts] : resume_->staleness_histogram) {
        for (const auto& [value, count] : counts) staleness_->AddCounts(worker, value, count);
      }
    }
    checkpointer_ = std::make_unique<Checkpointer>(
        run_->path(), static_cast<int>(s_.config.Int("experiment.checkpoint_keep")));
    out_ << "coordinator: run " << run_->id() << " at " << server_->endpoint() << ": "
         << s_.config.String("algorithm.name") << " with " << s_.workers << " workers, "
         << s_.spec.num_ps() << " shards" << (evaluator_process_ ? ", an evaluator" : "")
         << "; waiting for " << roles_.size() << " roles" << std::endl;
    phase_since_ = Steady::now();
    while (phase_ != Phase::kDone) {
      if (auto req = server_->Receive(milliseconds(20))) Handle(*req);
      if (const int sig = signals.Wait(milliseconds(0))) {
        Fail(sig == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)");
      }
      Tick();
    }
    return Finish();
  }

 private:
  enum class Phase { kRegistering, kInitialEval, kRunning, kStoppingWorkers, kFinalEval,
                     kStoppingShards, kDone };
  struct Role {
    bool registered = false;
    bool done = false;
    bool dead = false;
    bool told_to_stop = false;
    int64_t pid = 0;
    std::string host;
    Steady::time_point last_seen;
  };
  using Key = std::pair<std::string, int>;
  struct PendingEval {
    int64_t id = 0;
    bool full = false;
    bool sent = false;
    double time_s = 0;
    int64_t samples = 0, updates = 0;
    double train_loss = std::nan("");
  };

  void Expect() {
    for (int i = 0; i < s_.spec.num_ps(); ++i) roles_[{"ps", i}] = Role{};
    for (int i = 0; i < s_.workers; ++i) roles_[{"worker", i}] = Role{};
    evaluator_process_ = !s_.spec.evaluator.empty();
    if (evaluator_process_) roles_[{"evaluator", 0}] = Role{};
    workers_.resize(static_cast<std::size_t>(s_.workers));
    sample_budgets_.assign(workers_.size(), 0);
    step_budgets_.assign(workers_.size(), 0);
    for (int i = 0; i < s_.workers; ++i) workers_[static_cast<std::size_t>(i)].worker = i;
    retired_.assign(workers_.size(), WorkerMetrics{});
  }

  static std::string Name(const Key& k) { return StrCat(k.first, " ", k.second); }
  std::string Describe(const Key& k) const {
    const Role& r = roles_.at(k);
    return r.registered ? StrCat(Name(k), " (pid ", r.pid, " on ", r.host, ")") : Name(k);
  }

  // Training time: this coordinator's, plus a resumed run's before its checkpoint.
  double Elapsed() const {
    return time_base_ +
           (started_ ? std::chrono::duration<double>(Steady::now() - start_).count() : 0.0);
  }
  // Worker w's account over all its processes: those that were lost and replaced by a
  // restarted worker (retired_) and the current one.
  WorkerMetrics Total(std::size_t w) const {
    WorkerMetrics m = workers_[w];
    AddWorkerMetrics(m, retired_[w]);
    return m;
  }
  int64_t Samples() const {
    int64_t n = 0;
    for (std::size_t w = 0; w < workers_.size(); ++w) n += Total(w).samples;
    return n;
  }
  int64_t Updates() const {
    int64_t n = 0;
    for (std::size_t w = 0; w < workers_.size(); ++w) n += Total(w).pushes;
    return n;
  }
  int64_t Steps() const {
    int64_t n = 0;
    for (std::size_t w = 0; w < workers_.size(); ++w) n += Total(w).steps;
    return n;
  }
  bool WorkerLost(std::size_t w) const {
    const auto it = roles_.find(Key{"worker", static_cast<int>(w)});
    return it != roles_.end() && it->second.dead;
  }
  double Epochs() const {
    return static_cast<double>(Samples()) / static_cast<double>(s_.data.train.num_examples);
  }

  void Handle(const tp::ControlServer::Request& req) {
    json reply;
    json restore_reply;  // for a restarted ps: the checkpoint file it restores from
    try {
      const json msg = json::parse(req.text, nullptr, /*allow_exceptions=*/false);
      if (msg.is_discarded()) throw InputError("not JSON");
      const std::string type = Str(msg, "type");
      const Key key{Str(msg, "role"), static_cast<int>(Int(msg, "task"))};
      auto it = roles_.find(key);
      if (it == roles_.end()) throw InputError(StrCat("no ", Name(key), " in this cluster"));
      Role& role = it->second;
      if (type == "register") {
        const int64_t pid = Int(msg, "pid");
        if (role.registered && role.pid != pid && key.first == "worker" && role.dead) {
          // A restarted worker takes the lost one's place: what the lost process did
          // stays counted; the new one starts from the centre with its own counters.
          const auto w = static_cast<std::size_t>(key.second);
          AddWorkerMetrics(retired_[w], workers_[w]);
          workers_[w] = WorkerMetrics{};
          workers_[w].worker = key.second;
          role.dead = false;
          role.done = false;
          ++rejoined_workers_;
          ASGD_LOG(kWarning, "coordinator: ", Name(key), " rejoined (pid ", pid, ", was ",
                   role.pid, ")");
        } else if (role.registered && role.pid != pid && key.first == "ps" && role.dead &&
                   last_complete_) {
          // A restarted shard: it restores its range from the newest checkpoint before it
          // serves; the workers, paused meanwhile, go on once every shard is back.
          const auto& entry = last_complete_->shards[static_cast<std::size_t>(key.second)];
          const uint64_t before = ps_versions_[key.second];
          const uint64_t lost = before > entry.version ? before - entry.version : 0;
          lost_updates_ += static_cast<int64_t>(lost);
          ++ps_restarts_;
          role.dead = false;
          role.done = false;
          restore_reply = {{"file", last_complete_dir_ + "/" + entry.file},
                           {"sha256", entry.sha256}, {"version", entry.version}};
          ASGD_LOG(kWarning, "coordinator: ", Name(key), " restarted (pid ", pid, "); restoring it from ",
                   last_complete_dir_, " (version ", entry.version, "; ", lost,
                   " of its updates since are lost)");
        } else if (role.registered && role.pid != pid) {
          throw InputError(StrCat(Name(key), " is already registered (pid ", role.pid, ")"));
        } else if (!role.registered && key.first == "ps" && resume_) {
          const auto& entry = resume_->shards[static_cast<std::size_t>(key.second)];
          restore_reply = {{"file", last_complete_dir_ + "/" + entry.file},
                           {"sha256", entry.sha256}, {"version", entry.version}};
        }
        role.registered = true;
        role.pid = pid;
        role.host = Str(msg, "host");
        role.last_seen = Steady::now();
        ASGD_LOG(kInfo, "coordinator: ", Describe(key), " registered");
        reply = {{"ok", true}, {"run_id", run_->id()}};
        if (!restore_reply.is_null()) reply["restore"] = restore_reply;
        if (paused_ && key.first == "ps" && All("ps", Alive)) {
          const double paused_s = std::chrono::duration<double>(Steady::now() - pause_since_).count();
          paused_total_s_ += paused_s;
          paused_ = false;
          ASGD_LOG(kWarning, "coordinator: every shard is back; workers resume after ",
                   Fixed(paused_s, 1), " s");
        }
      } else if (type == "report") {
        if (!role.registered) throw InputError(StrCat(Name(key), " reports before registering"));
        if (role.dead && key.first == "worker") {
          // Silent longer than the timeout (stopped, swapped out, partitioned), now back:
          // a straggler. Its pushes meanwhile are the strategy's to judge (stale, dropped).
          role.dead = false;
          ++returned_stragglers_;
          ASGD_LOG(kWarning, "coordinator: ", Describe(key), " is back after ",
                   Fixed(std::chrono::duration<double>(Steady::now() - role.last_seen).count(), 1),
                   " s of silence (a straggler)");
        }
        role.last_seen = Steady::now();
        if (key.first == "worker") reply = WorkerReport(key.second, role, msg);
        if (key.first == "ps") reply = PsReport(role, msg);
        if (key.first == "evaluator") reply = EvaluatorReport(role, msg);
      } else {
        throw InputError("unknown message type \"" + type + "\"");
      }
    } catch (const std::exception& e) {
      ++bad_messages_;
      ASGD_LOG(kWarning, "coordinator: refused a message: ", e.what());
      reply = {{"error", e.what()}};
    }
    server_->Reply(req.peer, reply.dump());
  }

  json WorkerReport(int w, Role& role, const json& msg) {
    workers_[static_cast<std::size_t>(w)] = MetricsFrom(Field(msg, "metrics"), w);
    loss_sum_ += Num(msg, "loss_sum");
    loss_count_ += Int(msg, "loss_count");
    if (Bool(msg, "done")) {
      role.done = true;
      if (msg.contains("failure") && msg["failure"].is_string() && !msg["failure"].get<std::string>().empty()) {
        Fail(msg["failure"].get<std::string>());
      }
    }
    const bool stop = phase_ >= Phase::kStoppingWorkers;
    if (stop) role.told_to_stop = true;
    // What the worker may process before it must hear from the coordinator again: a share
    // of what no worker has done or been granted yet (at least a batch while anything is
    // left), so the run ends within about a batch per worker of its epochs or max_steps,
    // however fast the workers run between reports.
    const auto i = static_cast<std::size_t>(w);
    const WorkerMetrics m = Total(i);
    const Config& c = s_.config;
    // Budgets are kept over a worker's processes (Total); the reply is in the current
    // process's own count. A lost worker's unused grant goes back to the others.
    auto grant = [&](std::vector<int64_t>& budgets, double total, int64_t own,
                     int64_t WorkerMetrics::*done, int64_t batch) -> int64_t {
      double taken = static_cast<double>(own);
      int alive = 1;
      for (std::size_t v = 0; v < workers_.size(); ++v) {
        if (v == i) continue;
        const int64_t v_done = Total(v).*done;
        if (WorkerLost(v)) {
          taken += static_cast<double>(v_done);
        } else {
          taken += static_cast<double>(std::max(v_done, budgets[v]));
          ++alive;
        }
      }
      const double left = total - taken;
      int64_t share = 0;
      if (left > 0 && !paused_) {
        share = std::max<int64_t>(
            batch, static_cast<int64_t>(std::ceil(left / static_cast<double>(alive))));
      }
      budgets[i] = own + share;
      return budgets[i] - retired_[i].*done;
    };
    const int64_t sample_budget =
        grant(sample_budgets_,
              c.Double("experiment.epochs") * static_cast<double>(s_.data.train.num_examples),
              m.samples, &WorkerMetrics::samples, c.Int("algorithm.batch_size"));
    const int64_t max_steps = c.Int("experiment.max_steps");
    const int64_t step_budget =
        max_steps > 0 ? grant(step_budgets_, static_cast<double>(max_steps), m.steps,
                              &WorkerMetrics::steps, 1)
                      : -1;
    return {{"start", phase_ >= Phase::kRunning},
            {"stop", stop},
            {"paused", paused_},
            {"samples", Samples()},
            {"sample_budget", sample_budget},
            {"step_budget", step_budget}};
  }

  json PsReport(Role& role, const json& msg) {
    const json& records = Field(msg, "records");
    if (!records.is_array()) throw InputError("\"records\" is not an array");
    for (const json& r : records) {
      if (!r.is_array() || r.size() != 7) throw InputError("a staleness record is not 7 values");
      tp::StalenessRecord rec;
      rec.worker = static_cast<uint32_t>(r[0].get<int64_t>());
      rec.shard = static_cast<uint32_t>(r[1].get<int64_t>());
      rec.step = r[2].get<int64_t>();
      rec.pulled_version = r[3].get<uint64_t>();
      rec.applied_version = r[4].get<uint64_t>();
      rec.staleness = r[5].get<int64_t>();  // as the rule stated it (ssp: clocks)
      rec.wall_time_s = started_ ? r[6].get<double>() - start_wall_ : 0.0;
      staleness_->Record(rec);
    }
    if (Bool(msg, "done")) role.done = true;
    const int ps = PsIndex(role);
    if (msg.contains("version") && msg["version"].is_number_unsigned()) {
      ps_versions_[ps] = msg["version"].get<uint64_t>();
    }
    if (msg.contains("saved") && msg["saved"].is_object() && ckpt_) {
      const json& saved = msg["saved"];
      if (Int(saved, "step") == ckpt_->manifest.step) {
        CheckpointManifest::Shard e;
        e.file = Str(saved, "file");
        e.sha256 = Str(saved, "sha256");
        e.version = static_cast<uint64_t>(Int(saved, "version"));
        e.elements = Int(saved, "elements");
        ckpt_->saved[ps] = e;
        if (static_cast<int>(ckpt_->saved.size()) == s_.spec.num_ps()) CompleteCheckpoint();
      }
    }
    json reply = {{"close", close_shards_}, {"stop", phase_ >= Phase::kStoppingShards},
                  {"live_workers", LiveWorkers()}};
    if (ckpt_ && !ckpt_->saved.count(ps)) {
      reply["checkpoint"] = {{"step", ckpt_->manifest.step}, {"dir", ckpt_->dir}};
    }
    return reply;
  }

  int PsIndex(const Role& role) const {
    for (const auto& [key, r] : roles_) {
      if (&r == &role) return key.second;
    }
    return -1;
  }

  // ---- checkpoints (multi-process): the coordinator asks, each ps saves its own file
  // into the folder, the coordinator writes the manifest once all have. ----------------
  void MaybeCheckpoint() {
    const Config& c = s_.config;
    const int64_t every_steps = c.Int("experiment.checkpoint_every_steps");
    const double every_s = c.Double("experiment.checkpoint_every_s");
    if (ckpt_ || paused_ || (every_steps <= 0 && every_s <= 0)) return;
    const int64_t updates = Updates();
    const bool due = (every_steps > 0 && updates >= last_ckpt_step_ + every_steps) ||
                     (every_s > 0 && Elapsed() - last_ckpt_s_ >= every_s);
    if (!due || updates == last_ckpt_step_) return;
    Checkpoint request;
    CheckpointManifest& m = request.manifest;
    m.step = updates;
    m.steps = Steps();
    m.samples = Samples();
    m.time_s = Elapsed();
    m.convergence_rows = convergence_->rows() + (resume_ ? resume_->convergence_rows : 0);
    m.resumes = resume_ ? resume_->resumes + 1 : 0;
    m.staleness_rows = staleness_->rows_written();
    m.staleness_histogram = staleness_->histogram();
    for (std::size_t w = 0; w < workers_.size(); ++w) m.workers.push_back(Total(w));
    m.best_test_accuracy = best_accuracy_;
    m.time_to_target_s = time_to_target_;
    m.config_hash = TrainingConfigHash(c);
    m.algorithm = s_.strategy->name;
    request.dir = checkpointer_->Folder(m.step);
    request.since = Steady::now();
    ckpt_ = std::move(request);
    last_ckpt_step_ = updates;
    last_ckpt_s_ = Elapsed();
  }

  void CompleteCheckpoint() {
    CheckpointManifest m = ckpt_->manifest;
    m.shards.clear();
    for (const auto& [ps, entry] : ckpt_->saved) m.shards.push_back(entry);
    try {
      const std::string dir = checkpointer_->WriteManifest(m);
      last_complete_ = m;
      last_complete_dir_ = dir;
      out_ << "coordinator: checkpoint " << dir << " (update " << m.step << ")" << std::endl;
    } catch (const IoError& e) {
      ASGD_LOG(kError, "coordinator: checkpoint failed: ", e.what());
    }
    ckpt_.reset();
  }

  json EvaluatorReport(Role& role, const json& msg) {
    if (msg.contains("result") && !msg["result"].is_null()) {
      const json& r = msg["result"];
      models::EvalResult e;
      e.loss_sum = Num(r, "loss_sum");
      e.correct = Int(r, "correct");
      e.count = Int(r, "count");
      if (pending_ && Int(r, "id") == pending_->id) Evaluated(e);
    }
    if (Bool(msg, "done")) role.done = true;
    json reply = {{"stop", phase_ >= Phase::kStoppingShards}};
    if (pending_) {
      reply["evaluate"] = {{"id", pending_->id}, {"full", pending_->full}};
      pending_->sent = true;
    }
    return reply;
  }

  // Asks for an evaluation now (the evaluator's next report takes it), or does it here.
  void RequestEval(bool full) {
    PendingEval p;
    p.id = ++eval_id_;
    p.full = full;
    p.time_s = Elapsed();
    p.samples = Samples();
    p.updates = Updates();
    if (loss_count_ > 0) p.train_loss = loss_sum_ / static_cast<double>(loss_count_);
    loss_sum_ = 0;
    loss_count_ = 0;
    pending_ = p;
    if (!evaluator_process_) {
      try {
        if (auto r = inline_evaluator_->Evaluate(full)) {
          Evaluated(*r);
        } else {
          pending_.reset();  // dropped: the next one is asked for as usual
        }
      } catch (const InputError& e) {
        Fail(e.what());
      }
    }
  }

  void Evaluated(const models::EvalResult& r) {
    const PendingEval p = *pending_;
    pending_.reset();
    const double epoch = static_cast<double>(p.samples) / static_cast<double>(s_.data.train.num_examples);
    convergence_->Write(p.time_s, epoch, p.samples, p.updates, p.train_loss, r.mean_loss(),
                        r.accuracy(), r.count,
                        s_.config.Double("algorithm.learning_rate") *
                            alg::LearningRateScale(s_.schedule, epoch));
    ASGD_LOG(kInfo, "epoch ", Fixed(epoch, 2), ", ", p.updates, " updates: test accuracy ",
             Fixed(r.accuracy(), 4), " (", r.count, " examples), loss ", Fixed(r.mean_loss(), 4));
    final_accuracy_ = r.accuracy();
    final_loss_ = r.mean_loss();
    best_accuracy_ = std::max(best_accuracy_, r.accuracy());
    const double target = s_.config.Double("experiment.target_accuracy");
    if (target > 0 && time_to_target_ < 0 && r.accuracy() >= target) time_to_target_ = p.time_s;
    last_eval_s_ = p.time_s;
  }

  static std::string Fixed(double v, int digits) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
    return buf;
  }

  void Fail(const std::string& why) {
    if (failure_.empty()) {
      failure_ = why;
      ASGD_LOG(kError, "coordinator: ", why);
    }
    if (phase_ < Phase::kStoppingWorkers) Enter(Phase::kStoppingWorkers);
  }

  void Enter(Phase p) {
    phase_ = p;
    phase_since_ = Steady::now();
  }
  bool PhaseOlderThan(milliseconds d) const { return Steady::now() - phase_since_ > d; }

  void CheckLiveness() {
    for (auto& [key, role] : roles_) {
      if (!role.registered || role.done || role.dead) continue;
      // The evaluator reports between evaluations only, and reading the centre may take
      // up to cluster.timeout_s when a shard is down.
      const auto patience =
          key.first == "evaluator" ? s_.heartbeat_timeout + s_.timeout : s_.heartbeat_timeout;
      if (Steady::now() - role.last_seen > patience) {
        role.dead = true;
        const std::string what = StrCat(Describe(key), " sent nothing for ",
                                        std::chrono::duration<double>(s_.heartbeat_timeout).count(), " s");
        const std::string why_not = key.first == "worker" ? WorkerLossFatal() : "";
        const bool training = phase_ == Phase::kRunning || phase_ == Phase::kStoppingWorkers;
        if (key.first == "ps" && phase_ == Phase::kRunning && last_complete_) {
          if (!paused_) pause_since_ = Steady::now();
          paused_ = true;
          ckpt_.reset();  // a checkpoint in progress cannot complete without the shard
          ASGD_LOG(kWarning, "coordinator: ", what, "; workers pause until it is restarted "
                   "(`asgd ps --config C --task ", key.second, "` with the run's cluster) and "
                   "restored from ", last_complete_dir_);
          continue;
        }
        if (key.first == "worker" && why_not.empty() && training) {
          ++lost_workers_;
          ASGD_LOG(kWarning, "coordinator: ", what, "; training goes on without it "
                   "(cluster.on_worker_loss = continue)",
                   s_.strategy->synchronous
                       ? StrCat("; synchronous rounds re-formed with ", LiveWorkers(), " workers")
                       : std::string());
        } else {
          Fail(why_not.empty() ? what : StrCat(what, "; ", why_not));
        }
      }
    }
  }

  // Why losing a worker now ends the run; "" if the run can go on without it.
  std::string WorkerLossFatal() const {
    if (s_.config.String("cluster.on_worker_loss") == "fail") return "cluster.on_worker_loss = fail";
    if (!s_.strategy->synchronous) return "";
    if (LiveWorkers() == 0) return "no worker is left";
    // The rounds of sync_sgd, sagn, easgd and model_averaging are re-formed with the
    // survivors (the shards hear of it in their next report: SetLiveWorkers); SSP's clock
    // table would wait for the lost worker's clock forever.
    if (s_.strategy->name == "ssp") {
      return "ssp waits for every worker's clock (re-forming SSP without a worker is not "
             "supported)";
    }
    return "";
  }

  int LiveWorkers() const {
    int alive = 0;
    for (std::size_t v = 0; v < workers_.size(); ++v) alive += WorkerLost(v) ? 0 : 1;
    return alive;
  }

  bool All(const std::string& kind, bool (*pred)(const Role&)) const {
    for (const auto& [key, role] : roles_) {
      if (key.first == kind && !pred(role)) return false;
    }
    return true;
  }
  // A role that never registered is not waited for.
  static bool Finished(const Role& r) { return r.done || r.dead || !r.registered; }
  static bool ToldOrFinished(const Role& r) { return r.told_to_stop || r.done || r.dead; }
  static bool Alive(const Role& r) { return r.registered && !r.dead; }

  void Tick() {
    CheckLiveness();
    switch (phase_) {
      case Phase::kRegistering: {
        bool all = true;
        std::string missing;
        for (const auto& [key, role] : roles_) {
          if (!role.registered) {
            all = false;
            missing += (missing.empty() ? "" : ", ") + Name(key);
          }
        }
        if (all) {
          if (!evaluator_process_) {
            inline_evaluator_ = std::make_unique<CentreEvaluator>(context_, s_);
            const tp::Status st = inline_evaluator_->WaitForServers();
            if (!st.ok()) {
              Fail("coordinator: the shard servers: " + st.ToString());
              return;
            }
          }
          out_ << "coordinator: all " << roles_.size() << " roles registered" << std::endl;
          Enter(Phase::kInitialEval);
          RequestEval(false);
        } else if (PhaseOlderThan(s_.timeout)) {
          Fail("never registered within cluster.timeout_s: " + missing);
          Enter(Phase::kStoppingShards);
        }
        return;
      }
      case Phase::kInitialEval:
        if (!pending_) {
          started_ = true;
          start_ = Steady::now();
          start_wall_ = WallSeconds();
          Enter(Phase::kRunning);
        } else if (PhaseOlderThan(s_.timeout)) {
          Fail("the evaluator did not evaluate the initial parameters within cluster.timeout_s");
        }
        return;
      case Phase::kRunning:
        Running();
        return;
      case Phase::kStoppingWorkers:
        // Synchronous strategies: once every worker was told to stop, the shards are
        // closed so that a worker held in a round is let go (kShuttingDown ends its loop).
        if (All("worker", ToldOrFinished)) close_shards_ = s_.strategy->synchronous || !failure_.empty();
        if (All("worker", Finished)) {
          if (failure_.empty()) {
            Enter(Phase::kFinalEval);
            RequestEval(true);
          } else {
            Enter(Phase::kStoppingShards);
          }
        } else if (PhaseOlderThan(s_.timeout)) {
          Fail("workers did not stop within cluster.timeout_s");
          Enter(Phase::kStoppingShards);
        }
        return;
      case Phase::kFinalEval:
        if (!pending_) {
          Enter(Phase::kStoppingShards);
        } else if (PhaseOlderThan(s_.timeout)) {
          Fail("the final evaluation did not arrive within cluster.timeout_s");
          Enter(Phase::kStoppingShards);
        }
        return;
      case Phase::kStoppingShards:
        close_shards_ = true;
        if ((All("ps", Finished) && All("evaluator", Finished)) || PhaseOlderThan(s_.timeout)) {
          Enter(Phase::kDone);
        }
        return;
      case Phase::kDone:
        return;
    }
  }

  void Running() {
    const Config& c = s_.config;
    const double total = c.Double("experiment.epochs") * static_cast<double>(s_.data.train.num_examples);
    const int64_t max_steps = c.Int("experiment.max_steps");
    const double max_time = c.Double("experiment.max_time_s");
    std::string reason;
    if (static_cast<double>(Samples()) >= total) {
      reason = "reached " + c.Raw("experiment.epochs") + " epochs";
    } else if (max_steps > 0 && Steps() >= max_steps) {
      reason = "reached max_steps " + std::to_string(max_steps);
    } else if (max_time > 0 && Elapsed() >= max_time) {
      reason = "reached max_time_s " + c.Raw("experiment.max_time_s");
    } else if (c.Bool("experiment.stop_at_target") && time_to_target_ >= 0) {
      reason = "reached target accuracy " + c.Raw("experiment.target_accuracy");
    }
    if (paused_ && Steady::now() - pause_since_ > s_.timeout) {
      Fail("a lost shard was not restarted within cluster.timeout_s");
      return;
    }
    if (!reason.empty()) {
      reason_ = reason;
      Enter(Phase::kStoppingWorkers);
      return;
    }
    MaybeCheckpoint();
    if (pending_ || paused_) return;  // one evaluation at a time; none without every shard
    const double every = c.Double("metrics.eval_every_epochs") * static_cast<double>(s_.data.train.num_examples);
    const double every_s = c.Double("metrics.eval_every_s");
    if (static_cast<double>(Samples()) >= next_eval_samples_ + every ||
        (every_s > 0 && Elapsed() - last_eval_s_ >= every_s)) {
      while (next_eval_samples_ + every <= static_cast<double>(Samples())) next_eval_samples_ += every;
      RequestEval(false);
    }
  }

  int Finish() {
    const bool failed = !failure_.empty();
    const double wall = Elapsed();
    const StalenessRecorder::Stats st = staleness_->stats();
    SummaryRow summary;
    summary.run_id = run_->id();
    summary.algorithm = s_.config.String("algorithm.name");
    summary.model = s_.config.String("model.name");
    summary.dataset = s_.config.String("data.dataset");
    summary.workers = s_.workers;
    summary.ps_shards = s_.spec.num_ps();
    const std::string ps0 = s_.spec.PsAddress(0);
    summary.transport = ps0.substr(0, ps0.find(':'));
    summary.device = s_.config.String("model.device");
    std::replace(summary.device.begin(), summary.device.end(), ',', '+');
    summary.seed = static_cast<int64_t>(s_.seed);
    summary.epochs = Epochs();
    summary.samples = Samples();
    summary.updates = Updates();
    summary.wall_time_s = wall;
    summary.final_test_accuracy = final_accuracy_;
    summary.best_test_accuracy = best_accuracy_;
    summary.target_accuracy = s_.config.Double("experiment.target_accuracy");
    summary.time_to_target_s = time_to_target_;
    summary.staleness = st;
    std::vector<WorkerMetrics> totals;
    for (std::size_t w = 0; w < workers_.size(); ++w) {
      totals.push_back(Total(w));
      summary.dropped_pushes += totals.back().dropped_pushes;
      summary.bytes_pushed += totals.back().bytes_pushed;
      summary.bytes_pulled += totals.back().bytes_pulled;
    }
    summary.status = failed ? "failed" : "completed";
    WriteWorkers(*run_->Open("workers.csv"), totals);
    staleness_->WriteHistogram(*run_->Open("staleness_histogram.csv"));
    WriteSummary(*run_->Open("summary.csv"), summary);
    const std::string reason = failed ? failure_ : reason_;
    std::map<std::string, std::string> extra = {
        {"final_test_accuracy", CsvCell(final_accuracy_)},
        {"updates", std::to_string(summary.updates)},
        {"wall_time_s", CsvCell(wall)},
        {"mean_staleness", CsvCell(st.count > 0 ? st.mean : 0.0)},
        {"max_staleness", std::to_string(st.max)},
        {"staleness_records", std::to_string(st.count)},
        {"dropped_pushes", std::to_string(summary.dropped_pushes)}};
    if (time_to_target_ >= 0) extra["time_to_target_s"] = CsvCell(time_to_target_);
    extra["lost_workers"] = std::to_string(lost_workers_);
    extra["rejoined_workers"] = std::to_string(rejoined_workers_);
    extra["returned_stragglers"] = std::to_string(returned_stragglers_);
    extra["ps_restarts"] = std::to_string(ps_restarts_);
    extra["lost_updates"] = std::to_string(lost_updates_);
    extra["paused_s"] = CsvCell(paused_total_s_);
    run_->Finish(summary.status, reason, extra);
    if (bad_messages_ > 0) {
      ASGD_LOG(kWarning, "coordinator: refused ", bad_messages_, " malformed messages");
    }
    if (failed) {
      out_ << "run stopped: " << reason << "\nrun folder: " << run_->path() << std::endl;
      return kExitBadInput;
    }
    out_ << "final test accuracy: " << Fixed(final_accuracy_, 4) << " (loss "
         << Fixed(final_loss_, 4) << ") after " << Fixed(Epochs(), 2) << " epochs, "
         << summary.updates << " pushes, " << Fixed(wall, 1) << " s (" << reason << ")\n"
         << "mean staleness: " << Fixed(st.count > 0 ? st.mean : 0.0, 2) << " (max " << st.max
         << ") over " << st.count << " pushes";
    if (summary.dropped_pushes > 0) out_ << "; " << summary.dropped_pushes << " dropped as stale";
    out_ << "\nrun folder: " << run_->path() << std::endl;
    return kExitOk;
  }

  Setup& s_;
  const RoleRequest& request_;
  std::ostream& out_;
  std::shared_ptr<tp::Context> context_;
  std::unique_ptr<tp::ControlServer> server_;
  std::unique_ptr<RunDir> run_;
  std::unique_ptr<std::ofstream> convergence_file_, staleness_file_;
  std::unique_ptr<CsvWriter> convergence_;
  std::unique_ptr<StalenessRecorder> staleness_;
  std::unique_ptr<CentreEvaluator> inline_evaluator_;
  std::map<Key, Role> roles_;
  std::vector<WorkerMetrics> workers_;
  std::vector<WorkerMetrics> retired_;  // per worker: its lost processes' account
  int lost_workers_ = 0, rejoined_workers_ = 0, returned_stragglers_ = 0;
  // Checkpoints and lost shards.
  struct Checkpoint {
    CheckpointManifest manifest;  // the counters when it was asked for
    std::string dir;
    std::map<int, CheckpointManifest::Shard> saved;  // by ps
    Steady::time_point since;
  };
  std::unique_ptr<Checkpointer> checkpointer_;
  std::optional<CheckpointManifest> resume_;  // the checkpoint a resumed run started from
  double time_base_ = 0;
  std::optional<Checkpoint> ckpt_;
  std::optional<CheckpointManifest> last_complete_;
  std::string last_complete_dir_;
  int64_t last_ckpt_step_ = 0;
  double last_ckpt_s_ = 0;
  std::map<int, uint64_t> ps_versions_;  // as each ps last reported
  bool paused_ = false;
  Steady::time_point pause_since_;
  double paused_total_s_ = 0;
  int ps_restarts_ = 0;
  int64_t lost_updates_ = 0;
  std::vector<int64_t> sample_budgets_, step_budgets_;  // granted to each worker so far
  bool evaluator_process_ = false;
  Phase phase_ = Phase::kRegistering;
  Steady::time_point phase_since_;
  bool started_ = false;
  Steady::time_point start_;
  double start_wall_ = 0;
  double loss_sum_ = 0;
  int64_t loss_count_ = 0;
  std::optional<PendingEval> pending_;
  int64_t eval_id_ = 0;
  double next_eval_samples_ = 0;
  double last_eval_s_ = 0;
  double final_accuracy_ = 0, final_loss_ = 0, best_accuracy_ = 0, time_to_target_ = -1;
  bool close_shards_ = false;
  std::string failure_, reason_;
  int64_t bad_messages_ = 0;
};

}  // namespace

int RunCoordinatorRole(const Config& config, const RoleRequest& request, std::ostream& out) {
  Setup setup = MakeSetup(config, request, "coordinator");
  Coordinator coordinator(setup, request, out);
  return coordinator.Run();
}

// ======================================== ps ==========================================

namespace {

// Keeps staleness records until the next report takes them. Thread-safe.
class BufferedRecords final : public tp::StalenessSink {
 public:
  void Record(const tp::StalenessRecord& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    records_.push_back(r);
  }
  json Take() {
    std::vector<tp::StalenessRecord> taken;
    {
      std::lock_guard<std::mutex> lock(mu_);
      taken.swap(records_);
    }
    json a = json::array();
    for (const auto& r : taken) {
      a.push_back({r.worker, r.shard, r.step, r.pulled_version, r.applied_version, r.staleness,
                   r.wall_time_s});
    }
    return a;
  }

 private:
  std::mutex mu_;
  std::vector<tp::StalenessRecord> records_;
};

}  // namespace

int RunTrainingPsRole(const Config& config, const RoleRequest& request, std::ostream& out) {
  Setup s = MakeSetup(config, request, "ps");
  const int shard = s.spec.task_index;
  BlockedStopSignals signals;  // before any thread starts
  auto context = tp::NewContext();
  WallClock wall;
  BufferedRecords records;
  tp::ServerOptions options;
  options.shard = static_cast<uint32_t>(shard);
  options.endpoint = s.spec.PsBindAddress(shard, s.config.String("cluster.bind_host"));
  options.clock = &wall;
  options.staleness_sink = &records;
  options.curve = s.curve;
  tp::ShardServer server(context, options, s.placement.Gather(shard, s.Initial()),
                         s.strategy->server_rule(s.options, static_cast<uint32_t>(shard)));
  // Registered before serving: a restarted shard first restores its range from the
  // checkpoint the coordinator names (requests queue until then).
  CoordinatorLink link(context, s, "ps", shard);
  const json registered = link.Register();
  if (registered.contains("restore") && registered["restore"].is_object()) {
    const json& r = registered["restore"];
    const std::string file = Str(r, "file");
    const std::string bytes = ReadFile(file);
    if (Sha256Hex(bytes) != Str(r, "sha256")) {
      throw DataError(file, "SHA-256 differs from the checkpoint manifest's");
    }
    tp::ShardCheckpoint c = tp::DecodeShardCheckpoint(bytes, file);
    if (c.snapshot.shard != static_cast<uint32_t>(shard)) {
      throw DataError(file, StrCat("is shard ", c.snapshot.shard, "'s, not ", shard, "'s"));
    }
    server.Restore(c.snapshot);
    out << "ps " << shard << ": restored version " << c.snapshot.version << " from " << file
        << std::endl;
  }
  server.Start();
  out << "ps " << shard << ": serving " << s.placement.shard_size(shard) << " of "
      << s.model->layout().size() << " parameters (" << server.rule_name() << ") at "
      << server.endpoint() << std::endl;
  int status = kExitOk;
  json saved;  // the last checkpoint file written, until the coordinator has it
  int live_workers = 0;  // as the coordinator last said
  for (;;) {
    if (const int sig = signals.Wait(link.interval())) {
      out << "ps " << shard << ": " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ", stopping"
          << std::endl;
      status = kExitBadInput;
      break;
    }
    json body = {{"records", records.Take()}, {"version", server.stats().version}};
    if (!saved.is_null()) body["saved"] = saved;
    auto reply = link.Report(body, s.timeout);
    if (!reply) {
      if (link.Lost()) {
        out << "ps " << shard << ": the coordinator stopped answering; stopping" << std::endl;
        status = kExitBadInput;
        break;
      }
      continue;
    }
    if (reply->contains("checkpoint") && (*reply)["checkpoint"].is_object()) {
      const json& c = (*reply)["checkpoint"];
      const int64_t step = Int(c, "step");
      if (saved.is_null() || Int(saved, "step") != step) {
        try {
          const CheckpointManifest::Shard e = WriteShardFile(
              Str(c, "dir"), static_cast<std::size_t>(shard), server.Snapshot(), server.rule_name());
          saved = {{"step", step}, {"file", e.file}, {"sha256", e.sha256},
                   {"version", e.version}, {"elements", e.elements}};
        } catch (const IoError& e) {
          ASGD_LOG(kError, "ps ", shard, ": checkpoint failed: ", e.what());
        }
      }
    }
    // The run's live workers (a worker lost or back): synchronous rules re-form rounds.
    if (reply->contains("live_workers") && (*reply)["live_workers"].is_number_integer()) {
      const int live = (*reply)["live_workers"].get<int>();
      if (live > 0 && live != live_workers) {
        if (live_workers > 0) {
          out << "ps " << shard << ": " << live << " live workers" << std::endl;
        }
        live_workers = live;
        server.SetLiveWorkers(live);
      }
    }
    if (Bool(*reply, "close") && !server.closed()) server.Close();
    if (Bool(*reply, "stop")) break;
  }
  server.Shutdown();
  (void)link.Report({{"records", records.Take()}, {"done", true}}, s.report_interval * 10);
  const tp::ShardStats st = server.stats();
  out << "ps " << shard << ": stopped at version " << st.version << " after " << st.requests
      << " requests (" << st.pushes_applied + st.pushes_accepted << " pushes, "
      << st.pushes_dropped << " dropped, " << st.pulls << " pulls, " << st.errors
      << " error replies)" << std::endl;
  return status;
}

// ====================================== worker ========================================

int RunTrainingWorkerRole(const Config& config, const RoleRequest& request, std::ostream& out) {
  Setup s = MakeSetup(config, request, "worker");
  const int w = s.spec.task_index;
  BlockedStopSignals signals;  // a worker stops when the coordinator says so
  // The worker's model on its device (model.device), before registering: a device this
  // process cannot use is a ConfigError here, not a failure after the run started.
  const models::Device device = WorkerDevice(s.config, w, s.workers);
  std::unique_ptr<models::Model> device_model;
  if (device.is_cuda()) {
    device_model = models::NewModelOn(BuildModelOptions(s.config), InputSpecFor(s.data.train), device);
    ASGD_LOG(kInfo, "worker ", w, ": ", device_model->Describe());
  }
  auto context = tp::NewContext();
  CoordinatorLink link(context, s, "worker", w);
  link.Register();

  tp::ClientOptions co;
  co.id = static_cast<uint32_t>(w);
  co.timeout = s.timeout;
  co.curve = s.curve;
  PsParamClient client(tp::PsClient::FromCluster(context, s.spec, s.placement, co));
  const tp::Status servers = client.client().WaitForServers(s.timeout);
  if (!servers.ok()) throw InputError(StrCat("worker ", w, ": the shard servers: ", servers.ToString()));

  const auto partitions = datasets::PartitionIndices(s.data.train.num_examples, s.workers,
                                                     DeriveSeed(s.seed, "partition"));
  WorkerSetup ws;
  ws.worker = w;
  ws.num_workers = s.workers;
  ws.strategy = s.strategy;
  ws.options = s.options;
  ws.optimizer = s.optimizer;
  ws.learning_rate = WorkerLearningRate(s.config, w);
  ws.model = device_model ? device_model.get() : s.model.get();
  ws.train = &s.data.train;
  ws.examples = partitions[static_cast<std::size_t>(w)];
  ws.batch_size = s.config.Int("algorithm.batch_size");
  ws.seed = s.seed;
  ws.clock = nullptr;
  auto clock = NewSystemClock();
  ws.clock = clock.get();
  WorkerLoop loop(std::move(ws));

  std::atomic<bool> stop{false}, finished{false};
  std::atomic<int64_t> global_samples{0}, samples_at_report{0};
  std::atomic<int64_t> sample_budget{0}, step_budget{-1};
  std::mutex link_mu;  // the reporter thread and the training loop both report
  std::mutex loss_mu;
  double loss_sum = 0;
  int64_t loss_count = 0;
  std::string link_failure;
  auto report = [&](bool done, const std::string& failure) -> std::optional<json> {
    json body = {{"metrics", MetricsJson(loop.Snapshot())}, {"done", done}, {"failure", failure}};
    {
      std::lock_guard<std::mutex> lock(loss_mu);
      body["loss_sum"] = loss_sum;
      body["loss_count"] = loss_count;
      loss_sum = 0;
      loss_count = 0;
    }
    const int64_t own = loop.Snapshot().samples;
    std::lock_guard<std::mutex> lock(link_mu);
    auto reply = link.Report(body, s.timeout);
    if (reply) {
      global_samples.store(Int(*reply, "samples"));
      samples_at_report.store(own);
      sample_budget.store(Int(*reply, "sample_budget"));
      step_budget.store(Int(*reply, "step_budget"));
      if (Bool(*reply, "stop")) stop.store(true);
    }
    return reply;
  };
  // Wait for the coordinator's go (every worker and shard registered, initial evaluation
  // done), reporting as the heartbeat.
  for (;;) {
    auto reply = report(false, "");
    if (reply && Bool(*reply, "start")) break;
    if (stop.load()) break;
    if (!reply && link.Lost()) throw InputError(StrCat("worker ", w, ": the coordinator stopped answering"));
    if (signals.Wait(link.interval())) throw InputError(StrCat("worker ", w, ": interrupted"));
  }
  std::thread reporter([&] {
    while (!finished.load()) {
      if (const int sig = signals.Wait(link.interval())) {
        link_failure = sig == SIGINT ? "interrupted (SIGINT)" : "terminated (SIGTERM)";
        stop.store(true);
        break;
      }
      if (finished.load()) break;
      try {
        if (!report(false, "") && link.Lost()) {
          link_failure = "the coordinator stopped answering";
          stop.store(true);
        }
      } catch (const std::exception& e) {
        link_failure = e.what();
        stop.store(true);
      }
    }
  });
  const double train_size = static_cast<double>(s.data.train.num_examples);
  WorkerHooks hooks;
  auto exhausted = [&] {
    const WorkerMetrics m = loop.Snapshot();
    return m.samples >= sample_budget.load() || (step_budget.load() >= 0 && m.steps >= step_budget.load());
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
    *lr_scale = alg::LearningRateScale(s.schedule, static_cast<double>(estimate) / train_size);
    return true;
  };
  // A request that timed out (a shard died): wait while the coordinator pauses the run
  // for the shard's restart, then go on from a fresh read of the centre.
  hooks.recover = [&](const alg::Status& st) {
    if (st.code() != tp::StatusCode::kTimeout && st.code() != tp::StatusCode::kAborted) return false;
    ASGD_LOG(kWarning, "worker ", w, ": ", st.ToString(), "; asking the coordinator whether to go on");
    for (;;) {
      if (stop.load()) return false;
      auto reply = report(false, "");
      if (!reply) {
        if (link.Lost()) return false;
        continue;
      }
      if (!Bool(*reply, "paused")) return !stop.load();
      std::this_thread::sleep_for(link.interval());
    }
  };
  hooks.after_step = [&](const alg::StepResult& r, int64_t batch) {
    std::lock_guard<std::mutex> lock(loss_mu);
    loss_sum += static_cast<double>(r.loss) * static_cast<double>(batch);
    loss_count += batch;
  };
  hooks.ending = [&] { return stop.load(); };
  const WorkerOutcome outcome = loop.Run(client, hooks);
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
  out << "worker " << w << ": " << m.steps << " steps, " << m.samples << " samples, "
      << m.pushes << " pushes" << std::endl;
  return kExitOk;
}

// ===================================== evaluator ======================================

int RunEvaluatorRole(const Config& config, const RoleRequest& request, std::ostream& out) {
  Setup s = MakeSetup(config, request, "evaluator");
  if (s.spec.evaluator.empty()) {
    throw ConfigError("cluster.evaluator", "",
                      "the evaluator's address in the cluster (or leave evaluation to the "
                      "coordinator and start no evaluator)");
  }
  BlockedStopSignals signals;
  auto context = tp::NewContext();
  CoordinatorLink link(context, s, "evaluator", 0);
  link.Register();
  CentreEvaluator evaluator(context, s);
  const tp::Status servers = evaluator.WaitForServers();
  if (!servers.ok()) throw InputError("evaluator: the shard servers: " + servers.ToString());
  json result = nullptr;
  int64_t done_id = 0;
  int evaluations = 0;
  for (;;) {
    auto reply = link.Report({{"result", result}}, s.timeout);
    result = nullptr;
    if (!reply) {
      if (link.Lost()) {
        out << "evaluator: the coordinator stopped answering; stopping" << std::endl;
        return kExitBadInput;
      }
      continue;
    }
    if (Bool(*reply, "stop")) break;
    if (reply->contains("evaluate")) {
      const json& e = (*reply)["evaluate"];
      const int64_t id = Int(e, "id");
      if (id != done_id) {
        const std::optional<models::EvalResult> r = evaluator.Evaluate(Bool(e, "full"));
        if (!r) continue;  // a shard is down: the coordinator asks again
        result = {{"id", id}, {"loss_sum", r->loss_sum}, {"correct", r->correct}, {"count", r->count}};
        done_id = id;
        ++evaluations;
        continue;  // report it at once
      }
    }
    if (signals.Wait(link.interval())) {
      out << "evaluator: interrupted" << std::endl;
      return kExitBadInput;
    }
  }
  (void)link.Report({{"result", nullptr}, {"done", true}}, s.report_interval * 10);
  out << "evaluator: " << evaluations << " evaluations" << std::endl;
  return kExitOk;
}

}  // namespace asgd::experiments
