#include "experiments/cluster/coordinator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <variant>

#include "core/error.h"
#include "core/log.h"
#include "experiments/cluster/cluster_run.h"
#include "experiments/config/setup.h"

namespace asgd::experiments::cluster {

namespace tp = ::asgd::transport;
using ::asgd::internal::StrCat;

std::unique_ptr<CoordinatorFamily> CoordinatorFamily::For(Coordinator& c) {
  // The one place the coordinator asks the strategy's family (MakeSetup refused the
  // sequential baseline).
  if (c.s_.problem.plan.family == algorithms::Family::kGroup) return NewGroupFamily(c);
  return NewStoreFamily(c);
}

Coordinator::Coordinator(Setup& setup, const RoleRequest& request, std::ostream& out)
    : s_(setup), request_(request), out_(out) {
  // The stop rules and the schedule are checked before the server binds (ConfigError),
  // as `asgd run` checks them before its folder.
  (void)setup.problem.plan.MakeStopPolicy(setup.problem.data.train.num_examples);
  (void)setup.problem.plan.MakeEvalSchedule(setup.problem.data.train.num_examples);
  family_ = CoordinatorFamily::For(*this);
}

Coordinator::~Coordinator() = default;

int Coordinator::Run() {
  BlockedStopSignals signals;  // before the ZeroMQ context starts its threads
  context_ = tp::NewContext();
  const std::string bind = s_.spec.CoordinatorBindAddress(s_.cluster().bind_host);
  server_ =
      std::make_unique<tp::ControlServer>(context_, bind, tp::ControlOptions{.curve = s_.curve});
  Expect();
  OpenSession();
  out_ << "coordinator: run " << session_->run().id() << " at " << server_->endpoint() << ": "
       << s_.problem.plan.name << " with " << s_.problem.plan.workers << " workers, "
       << family_->Shape() << "; waiting for " << roles_.size() << " roles" << std::endl;
  phase_since_ = Steady::now();
  while (phase_ != Phase::kDone) {
    if (auto req = server_->Receive(milliseconds(20))) Handle(*req);
    if (const int sig = signals.Wait(milliseconds(0))) {
      Fail(StopPolicy::SignalReason(sig));
    }
    Tick();
  }
  return Finish();
}

void Coordinator::OpenSession() {
  RunRequest run;
  run.name = request_.name;
  run.command_line = request_.command_line;
  run.data_dirs = request_.data_dirs;
  run.resume_dir = request_.resume_dir;
  SessionOptions options;
  options.clock = clock_.get();
  options.ef_residual = false;  // the residuals are the worker processes'
  options.checkpoint_shards = family_->CheckpointShards();
  // Each shard saved itself a little after the checkpoint was asked for.
  options.staleness_of_saved_shards = true;
  // The newest valid checkpoint, verified before anything is touched; every shard restores
  // its range from it when it registers (Answer), workers start from there.
  session_ = std::make_unique<RunSession>(s_.config, run, s_.problem, options);
  if (const CheckpointManifest* m = Resumed()) {
    last_complete_ = *m;
    last_complete_dir_ = session_->resume().dir;
    last_ckpt_step_ = m->step;
    out_ << "coordinator: resuming " << session_->run().id() << " from " << session_->resume().dir
         << " (" << CheckpointPosition(*m) << ")" << std::endl;
  }
  family_->Opened();
  lockstep_rounds_ = family_->LockstepRounds();
}

void Coordinator::Expect() {
  for (int i = 0; i < s_.problem.plan.workers; ++i) roles_[{"worker", i}] = Role{};
  family_->Expect();
  workers_.resize(static_cast<std::size_t>(s_.problem.plan.workers));
  sample_budgets_.assign(workers_.size(), 0);
  step_budgets_.assign(workers_.size(), 0);
  for (int i = 0; i < s_.problem.plan.workers; ++i) {
    workers_[static_cast<std::size_t>(i)].worker = i;
  }
  retired_.assign(workers_.size(), WorkerMetrics{});
}

std::string Coordinator::Name(const Key& k) { return StrCat(k.first, " ", k.second); }
std::string Coordinator::Describe(const Key& k) const {
  const Role& r = roles_.at(k);
  return r.registered ? StrCat(Name(k), " (pid ", r.pid, " on ", r.host, ")") : Name(k);
}

const CheckpointManifest* Coordinator::Resumed() const {
  return session_ && session_->resuming() ? &session_->resume().manifest : nullptr;
}
WorkerMetrics Coordinator::Earlier(std::size_t w) const {
  const CheckpointManifest* m = Resumed();
  return m != nullptr && w < m->workers.size() ? m->workers[w] : WorkerMetrics{};
}
WorkerMetrics Coordinator::ThisRun(std::size_t w) const {
  WorkerMetrics m = workers_[w];
  AddWorkerMetrics(m, retired_[w]);
  return m;
}
WorkerMetrics Coordinator::Before(std::size_t w) const {
  WorkerMetrics m = retired_[w];
  AddWorkerMetrics(m, Earlier(w));
  return m;
}
WorkerMetrics Coordinator::Total(std::size_t w) const {
  WorkerMetrics m = workers_[w];
  AddWorkerMetrics(m, Before(w));
  return m;
}
int64_t Coordinator::Samples() const {
  int64_t n = 0;
  for (std::size_t w = 0; w < workers_.size(); ++w) n += Total(w).samples;
  return n;
}
int64_t Coordinator::Updates() const {
  int64_t n = 0;
  for (std::size_t w = 0; w < workers_.size(); ++w) n += Total(w).pushes;
  return n;
}
int64_t Coordinator::RecordedUpdates() const { return family_->Recorded(Updates()); }
int64_t Coordinator::Steps() const {
  int64_t n = 0;
  for (std::size_t w = 0; w < workers_.size(); ++w) n += Total(w).steps;
  return n;
}
bool Coordinator::WorkerLost(std::size_t w) const {
  const auto it = roles_.find(Key{"worker", static_cast<int>(w)});
  return it != roles_.end() && it->second.dead;
}
double Coordinator::TakeTrainLoss() {
  const double mean = loss_count_ > 0 ? loss_sum_ / static_cast<double>(loss_count_) : std::nan("");
  loss_sum_ = 0;
  loss_count_ = 0;
  return mean;
}

// ---- the roles' messages ---------------------------------------------------------

void Coordinator::Handle(const tp::ControlServer::Request& req) {
  std::string reply;
  try {
    ControlRequest msg;
    const ControlError e = DecodeRequest(req.text, &msg);
    if (!e.ok()) throw InputError(e.message());
    reply = std::visit([&](const auto& m) { return Answer(m); }, msg);
  } catch (const std::exception& e) {
    // A peer's message is input: refused with one line, the run goes on.
    ++bad_messages_;
    ASGD_LOG(kWarning, "coordinator: refused a message: ", e.what());
    reply = Encode(ErrorReply{e.what()});
  }
  server_->Reply(req.peer, reply);
}

Coordinator::Role& Coordinator::Find(const Key& key) {
  auto it = roles_.find(key);
  if (it == roles_.end()) throw InputError(StrCat("no ", Name(key), " in this cluster"));
  return it->second;
}

std::string Coordinator::Answer(const RegisterRequest& m) {
  const Key key{m.role, m.task};
  Role& role = Find(key);
  const int64_t pid = m.pid;
  RegisterReply reply;
  const bool rejoined = role.registered && role.pid != pid && key.first == "worker" && role.dead;
  if (rejoined) {
    // A restarted worker takes the lost one's place: what the lost process did
    // stays counted; the new one starts from the centre with its own counters.
    const auto w = static_cast<std::size_t>(key.second);
    AddWorkerMetrics(retired_[w], workers_[w]);
    workers_[w] = WorkerMetrics{};
    workers_[w].worker = key.second;
    role.dead = false;
    role.done = false;
    ++rejoined_workers_;
    ASGD_LOG(kWarning, "coordinator: ", Name(key), " rejoined (pid ", pid, ", was ", role.pid, ")");
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
    reply.restore =
        RestoreOrder{last_complete_dir_ + "/" + entry.file, entry.sha256, entry.version};
    ASGD_LOG(kWarning, "coordinator: ", Name(key), " restarted (pid ", pid, "); restoring it from ",
             last_complete_dir_, " (version ", entry.version, "; ", lost,
             " of its updates since are lost)");
  } else if (role.registered && role.pid != pid) {
    throw InputError(StrCat(Name(key), " is already registered (pid ", role.pid, ")"));
  } else if (!role.registered && key.first == "ps" && Resumed()) {
    const auto& entry = Resumed()->shards[static_cast<std::size_t>(key.second)];
    reply.restore =
        RestoreOrder{last_complete_dir_ + "/" + entry.file, entry.sha256, entry.version};
  }
  role.registered = true;
  role.pid = pid;
  role.host = m.host;
  role.last_seen = Steady::now();
  ASGD_LOG(kInfo, "coordinator: ", Describe(key), " registered");
  reply.run_id = session_->run().id();
  family_->Registered(key, rejoined, reply);
  if (paused_ && key.first == "ps" && All("ps", Alive)) {
    const double paused_s = std::chrono::duration<double>(Steady::now() - pause_since_).count();
    paused_total_s_ += paused_s;
    paused_ = false;
    ASGD_LOG(kWarning, "coordinator: every shard is back; workers resume after ",
             Fixed(paused_s, 1), " s");
  }
  return Encode(reply);
}

Coordinator::Role& Coordinator::Reporting(const Key& key) {
  Role& role = Find(key);
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
  return role;
}

std::string Coordinator::Answer(const WorkerReport& msg) {
  const int w = msg.task;
  Role& role = Reporting({"worker", w});
  workers_[static_cast<std::size_t>(w)] = msg.metrics;
  loss_sum_ += msg.loss_sum;
  loss_count_ += msg.loss_count;
  family_->WorkerReported(msg);
  if (msg.done) {
    role.done = true;
    if (!msg.failure.empty()) family_->WorkerFailed(w, msg.failure);
  }
  const bool stop = phase_ >= Phase::kStoppingWorkers;
  if (stop) role.told_to_stop = true;
  // What the worker may process before it must hear from the coordinator again
  // (GrantBudget). Budgets are kept over a worker's processes (Total); the reply is in the
  // current process's own count.
  const auto i = static_cast<std::size_t>(w);
  const WorkerMetrics m = Total(i);
  const WorkerMetrics before = Before(i);
  auto grant = [&](std::vector<int64_t>& budgets, double total, int64_t own,
                   int64_t WorkerMetrics::*done, int64_t batch) -> int64_t {
    std::vector<PeerBudget> peers;
    for (std::size_t v = 0; v < workers_.size(); ++v) {
      if (v != i) peers.push_back({Total(v).*done, budgets[v], WorkerLost(v)});
    }
    budgets[i] = GrantBudget(total, own, peers, batch, paused_);
    return budgets[i] - before.*done;
  };
  WorkerReply reply;
  const StopPolicy& stop_rules = session_->stop();
  reply.sample_budget = grant(sample_budgets_, stop_rules.total_samples(), m.samples,
                              &WorkerMetrics::samples, s_.problem.plan.batch_size);
  const int64_t max_steps = stop_rules.limits().max_steps;
  reply.step_budget = max_steps > 0 ? grant(step_budgets_, static_cast<double>(max_steps), m.steps,
                                            &WorkerMetrics::steps, 1)
                                    : -1;
  bool all_alive = true;
  for (std::size_t v = 0; v < workers_.size(); ++v) all_alive = all_alive && !WorkerLost(v);
  if (lockstep_rounds_ > 0 && !paused_ && all_alive) {
    // Every worker takes exactly the run's rounds (lockstep_rounds_), whatever it reported
    // when: the shares above could grant one worker a batch more than its part, and then
    // every worker an extra round.
    reply.sample_budget = std::numeric_limits<int64_t>::max();
    reply.step_budget = lockstep_rounds_ - before.steps;
  }
  reply.start = phase_ >= Phase::kRunning;
  reply.stop = stop;
  reply.paused = paused_;
  reply.samples = Samples();
  family_->FillReply(w, reply);
  return Encode(reply);
}

std::string Coordinator::Answer(const PsReport& msg) {
  const int ps = msg.task;
  Role& role = Reporting({"ps", ps});
  for (ps::StalenessRecord rec : msg.records) {
    // The shard stamped wall-clock time; the run's time axis starts at start_wall_.
    rec.wall_time_s = started_ ? rec.wall_time_s - start_wall_ : 0.0;
    session_->staleness()->Record(rec);  // staleness as the rule stated it (ssp: clocks)
  }
  session_->staleness()->Flush();
  if (msg.done) role.done = true;
  if (msg.version) ps_versions_[ps] = *msg.version;
  if (msg.saved && ckpt_ && msg.saved->step == ckpt_->manifest.step) {
    CheckpointManifest::Shard e;
    e.file = msg.saved->file;
    e.sha256 = msg.saved->sha256;
    e.version = msg.saved->version;
    e.elements = msg.saved->elements;
    ckpt_->saved[ps] = e;
    if (static_cast<int>(ckpt_->saved.size()) == s_.spec.num_ps()) CompleteCheckpoint();
  }
  PsReply reply;
  reply.close = close_shards_;
  reply.stop = phase_ >= Phase::kStoppingShards;
  reply.live_workers = LiveWorkers();
  if (ckpt_ && !ckpt_->saved.count(ps))
    reply.checkpoint = CheckpointOrder{ckpt_->manifest.step, ckpt_->dir};
  return Encode(reply);
}

EvalOrder Coordinator::Order(const PendingEval& p) const {
  EvalOrder o{p.id, p.full, std::nullopt};
  if (s_.problem.model->CanSave()) o.best_above = session_->recorder().best_test_accuracy();
  return o;
}

std::string Coordinator::Answer(const EvaluatorReport& msg) {
  Role& role = Reporting({"evaluator", msg.task});
  if (msg.result) {
    models::EvalResult e;
    e.loss_sum = msg.result->loss_sum;
    e.correct = msg.result->correct;
    e.count = msg.result->count;
    if (pending_ && msg.result->id == pending_->id) Evaluated(e);
  }
  if (msg.done) role.done = true;
  EvaluatorReply reply;
  reply.stop = phase_ >= Phase::kStoppingShards;
  if (pending_) {
    reply.evaluate = Order(*pending_);
    pending_->sent = true;
  }
  return Encode(reply);
}

int64_t GrantBudget(double total, int64_t own, const std::vector<PeerBudget>& peers, int64_t batch,
                    bool paused) {
  if (paused) return own;
  double taken = static_cast<double>(own);
  double done_all = static_cast<double>(own);
  int alive = 1;
  for (const PeerBudget& p : peers) {
    done_all += static_cast<double>(p.done);
    if (p.lost) {
      taken += static_cast<double>(p.done);
    } else {
      taken += static_cast<double>(std::max(p.done, p.granted));
      ++alive;
    }
  }
  const double left = total - taken;
  if (left > 0) {
    return own + std::max<int64_t>(
                     batch, static_cast<int64_t>(std::ceil(left / static_cast<double>(alive))));
  }
  return total - done_all > 0 ? own + batch : own;
}

}  // namespace asgd::experiments::cluster

namespace asgd::experiments {

int RunCoordinatorRole(const Config& config, const RoleRequest& request, std::ostream& out) {
  cluster::Setup setup = cluster::MakeSetup(config, request, "coordinator");
  cluster::Coordinator coordinator(setup, request, out);
  return coordinator.Run();
}

}  // namespace asgd::experiments
