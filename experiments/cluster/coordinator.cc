#include "experiments/cluster/coordinator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <variant>

#include "algorithms/sync_rule.h"
#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "datasets/partition.h"
#include "experiments/cluster/cluster_run.h"
#include "experiments/config/setup.h"
#include "experiments/run/collective_runner.h"

namespace asgd::experiments::cluster {

namespace tp = ::asgd::transport;
using ::asgd::internal::StrCat;

int Coordinator::Run() {
  BlockedStopSignals signals;  // before the ZeroMQ context starts its threads
  context_ = tp::NewContext();
  const std::string bind = s_.spec.CoordinatorBindAddress(s_.cluster().bind_host);
  server_ =
      std::make_unique<tp::ControlServer>(context_, bind, tp::ControlOptions{.curve = s_.curve});
  Expect();
  OpenRunDir();
  checkpointer_ = std::make_unique<Checkpointer>(
      run_->path(), s_.problem.plan.checkpoint_keep);
  out_ << "coordinator: run " << run_->id() << " at " << server_->endpoint() << ": "
       << s_.problem.plan.name << " with " << s_.problem.plan.workers << " workers, "
       << (collective_ ? StrCat("on gloo (", s_.config.String("collective.algorithm"), ")")
                       : StrCat(s_.spec.num_ps(), " shards"))
       << (evaluator_process_ ? ", an evaluator" : "") << "; waiting for " << roles_.size()
       << " roles" << std::endl;
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

void Coordinator::OpenRunDir() {
  const bool resuming = !request_.resume_dir.empty();
  if (resuming) {
    // The newest valid checkpoint, verified before anything is touched; every shard
    // restores its range from it when it registers (Handle), workers start from there.
    LoadedCheckpoint c = LoadNewestCheckpoint(request_.resume_dir, s_.problem.plan.config_hash);
    if (collective_) {
      CheckCollectiveCheckpoint(c, s_.problem.model->layout().size());
      first_step_ = static_cast<int64_t>(c.shards[0].version);
    } else if (static_cast<int>(c.manifest.shards.size()) != s_.spec.num_ps()) {
      throw DataError(c.dir, StrCat("holds ", c.manifest.shards.size(), " shards, the run has ",
                                    s_.spec.num_ps()));
    }
    // Each shard saved itself a little after the checkpoint was asked for: staleness.csv
    // keeps exactly the rows of the pushes the saved shards hold (while every push has
    // its row: below metrics.staleness_rows), else the rows counted at the request.
    const bool filter = c.manifest.staleness_rows < s_.problem.plan.staleness_rows;
    run_ = std::make_unique<RunDir>(ReopenRunDir(request_.resume_dir, request_.command_line,
                                                 c.manifest, /*truncate_staleness=*/!filter));
    if (filter) {
      std::vector<uint64_t> versions;
      for (const auto& shard : c.manifest.shards) versions.push_back(shard.version);
      const KeptStaleness kept = FilterStalenessCsv(run_->File("staleness.csv"), versions);
      c.manifest.staleness_rows = kept.rows;
      c.manifest.staleness_histogram = kept.histogram;
      if (!s_.problem.plan.strategy->synchronous && !collective_) {
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
    }
    resume_ = c.manifest;
    last_complete_ = c.manifest;
    last_complete_dir_ = c.dir;
    time_base_ = c.manifest.time_s;
    for (std::size_t w = 0; w < workers_.size() && w < c.manifest.workers.size(); ++w) {
      retired_[w] = c.manifest.workers[w];
    }
    last_ckpt_step_ = c.manifest.step;
    out_ << "coordinator: resuming " << run_->id() << " from " << c.dir << " ("
         << CheckpointPosition(c.manifest) << ")" << std::endl;
  } else {
    run_ = std::make_unique<RunDir>(
        RunDir::Create(WithDataStatistics(s_.config, s_.problem.data.train), request_.name,
                       request_.command_line));
  }
  if (collective_) {
    // The ranks' file store: a fresh folder of the run for each attempt (absolute: the
    // workers may run elsewhere on a shared file system).
    namespace fs = std::filesystem;
    const fs::path dir = fs::absolute(fs::path(run_->path()) / "rendezvous");
    std::error_code ec;
    fs::remove_all(dir, ec);
    for (const char* group : {"payload", "control"}) {
      fs::create_directories(dir / group, ec);
      if (ec) throw IoError(StrCat("cannot create ", (dir / group).string(), ": ", ec.message()));
    }
    collective_dir_ = dir.string();
  }
  // Buffered staleness, as in the in-process runner: a report's records are written together.
  RunRecords records = RunRecords::Open(*run_, stop_.target_accuracy(), /*ef_residual=*/false,
                                        s_.problem.plan.staleness_rows,
                                        resuming ? &*resume_ : nullptr);
  recorder_ = std::move(records.recorder);
  staleness_file_ = std::move(records.staleness_file);
  staleness_ = std::move(records.staleness);
}

void Coordinator::Expect() {
  // A strategy on a collective has no shards and no evaluator (rank 0 evaluates).
  if (!collective_) {
    for (int i = 0; i < s_.spec.num_ps(); ++i) roles_[{"ps", i}] = Role{};
  }
  for (int i = 0; i < s_.problem.plan.workers; ++i) roles_[{"worker", i}] = Role{};
  evaluator_process_ = !collective_ && !s_.spec.evaluator.empty();
  staleness_steps_.assign(static_cast<std::size_t>(s_.problem.plan.workers), 0);
  if (collective_) {
    plan_ = CollectivePlan::Make(s_.problem.plan, s_.problem.strategy_options,
                                 s_.problem.partitions, s_.problem.data.train.num_examples);
  }
  if (evaluator_process_) roles_[{"evaluator", 0}] = Role{};
  workers_.resize(static_cast<std::size_t>(s_.problem.plan.workers));
  sample_budgets_.assign(workers_.size(), 0);
  step_budgets_.assign(workers_.size(), 0);
  for (int i = 0; i < s_.problem.plan.workers; ++i) {
    workers_[static_cast<std::size_t>(i)].worker = i;
  }
  retired_.assign(workers_.size(), WorkerMetrics{});
  lockstep_rounds_ = LockstepRounds();
}

int64_t Coordinator::LockstepRounds() const {
  const algorithms::Strategy& strategy = *s_.problem.plan.strategy;
  const int n = s_.problem.plan.workers;
  if (collective_ || !strategy.rounds || algorithms::Replicas(s_.problem.strategy_options) != n) return 0;
  // The workers' samples after r steps each, as their samplers draw them (each pass over
  // a part of p examples is ceil(p / B) batches, the last one partial).
  CollectivePlan steps;
  steps.workers = n;
  steps.batch_size = s_.problem.plan.batch_size;
  for (const auto& part : s_.problem.partitions) {
    steps.partition_sizes.push_back(static_cast<int64_t>(part.size()));
  }
  const int64_t max_steps = stop_.limits().max_steps;
  int64_t r = 0;
  while (static_cast<double>(steps.SamplesAtStep(r)) < stop_.total_samples() &&
         !(max_steps > 0 && r * n >= max_steps)) {
    ++r;
  }
  return r;
}

std::string Coordinator::Name(const Key& k) { return StrCat(k.first, " ", k.second); }
std::string Coordinator::Describe(const Key& k) const {
  const Role& r = roles_.at(k);
  return r.registered ? StrCat(Name(k), " (pid ", r.pid, " on ", r.host, ")") : Name(k);
}

double Coordinator::Elapsed() const { return training_ ? training_->Seconds() : time_base_; }
// Worker w's account over all its processes: those that were lost and replaced by a
// restarted worker (retired_) and the current one.
WorkerMetrics Coordinator::Total(std::size_t w) const {
  WorkerMetrics m = workers_[w];
  AddWorkerMetrics(m, retired_[w]);
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
int64_t Coordinator::RecordedUpdates() const {
  return collective_ ? Updates() / s_.problem.plan.workers : Updates();
}
int64_t Coordinator::Steps() const {
  int64_t n = 0;
  for (std::size_t w = 0; w < workers_.size(); ++w) n += Total(w).steps;
  return n;
}
bool Coordinator::WorkerLost(std::size_t w) const {
  const auto it = roles_.find(Key{"worker", static_cast<int>(w)});
  return it != roles_.end() && it->second.dead;
}
double Coordinator::Epochs() const {
  return static_cast<double>(Samples()) / static_cast<double>(s_.problem.data.train.num_examples);
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
  } else if (!role.registered && key.first == "ps" && resume_) {
    const auto& entry = resume_->shards[static_cast<std::size_t>(key.second)];
    reply.restore =
        RestoreOrder{last_complete_dir_ + "/" + entry.file, entry.sha256, entry.version};
  } else if (key.first == "worker" && collective_ && resume_) {
    // Every rank of a resumed run on a collective starts from the saved average.
    const auto& entry = resume_->shards[0];
    reply.restore =
        RestoreOrder{last_complete_dir_ + "/" + entry.file, entry.sha256, entry.version};
  }
  role.registered = true;
  role.pid = pid;
  role.host = m.host;
  role.last_seen = Steady::now();
  ASGD_LOG(kInfo, "coordinator: ", Describe(key), " registered");
  reply.run_id = run_->id();
  if (key.first == "worker") reply.collective_dir = collective_dir_;
  // The role that evaluates writes the models (the inline evaluator: Finish).
  const bool evaluates =
      key.first == "evaluator" || (key.first == "worker" && collective_ && key.second == 0);
  if (evaluates && s_.problem.model->CanSave()) {
    reply.save_dir = run_->path();
    reply.best_above = recorder_->best_test_accuracy();
  }
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
  if (collective_) {
    CollectiveStaleness(w, msg.metrics.steps);
    if (msg.evaluation) {
      CollectiveEvaluation e = *msg.evaluation;
      if (resume_) e.updates += resume_->step;  // rank 0 counts its own process's
      CollectiveEvaluated(e);
    }
    if (msg.saved && w == 0 && ckpt_ && msg.saved->shard.step == ckpt_->manifest.step) {
      CompleteCollectiveCheckpoint(*msg.saved);
    }
  }
  if (msg.done) {
    role.done = true;
    if (!msg.failure.empty()) {
      // On a collective every rank fails when one dies: which one is decided once the
      // others have ended or gone quiet (CheckCollectiveFailure).
      if (collective_) {
        collective_failures_.emplace_back(w, msg.failure);
      } else {
        Fail(msg.failure);
      }
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
      share = std::max<int64_t>(batch,
                                static_cast<int64_t>(std::ceil(left / static_cast<double>(alive))));
    }
    budgets[i] = own + share;
    return budgets[i] - retired_[i].*done;
  };
  WorkerReply reply;
  reply.sample_budget = grant(sample_budgets_, stop_.total_samples(), m.samples,
                              &WorkerMetrics::samples, s_.problem.plan.batch_size);
  const int64_t max_steps = stop_.limits().max_steps;
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
    reply.step_budget = lockstep_rounds_ - retired_[i].steps;
  }
  reply.start = phase_ >= Phase::kRunning;
  reply.stop = stop;
  reply.paused = paused_;
  reply.samples = Samples();
  if (collective_ && pending_ && phase_ == Phase::kRunning) {
    reply.evaluate = Order(*pending_);
  }
  if (collective_ && ckpt_ && phase_ == Phase::kRunning) {
    reply.checkpoint = CheckpointOrder{ckpt_->manifest.step, ckpt_->dir};
  }
  if (collective_ && w == 0 && s_.problem.model->CanSave()) {
    reply.best_above = recorder_->best_test_accuracy();
  }
  return Encode(reply);
}

std::string Coordinator::Answer(const PsReport& msg) {
  const int ps = msg.task;
  Role& role = Reporting({"ps", ps});
  for (ps::StalenessRecord rec : msg.records) {
    // The shard stamped wall-clock time; the run's time axis starts at start_wall_.
    rec.wall_time_s = started_ ? rec.wall_time_s - start_wall_ : 0.0;
    staleness_->Record(rec);  // staleness as the rule stated it (ssp: clocks)
  }
  staleness_->Flush();
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
  if (s_.problem.model->CanSave()) o.best_above = recorder_->best_test_accuracy();
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

}  // namespace asgd::experiments::cluster

namespace asgd::experiments {

int RunCoordinatorRole(const Config& config, const RoleRequest& request, std::ostream& out) {
  cluster::Setup setup = cluster::MakeSetup(config, request, "coordinator");
  cluster::Coordinator coordinator(setup, request, out);
  return coordinator.Run();
}

}  // namespace asgd::experiments
