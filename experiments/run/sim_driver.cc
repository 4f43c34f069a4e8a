#include "experiments/run/sim_driver.h"

#include <chrono>
#include <map>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/optimizer.h"
#include "algorithms/strategy.h"
#include "collective/collective.h"
#include "core/aligned.h"
#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "experiments/config/setup.h"
#include "experiments/record/csv.h"
#include "experiments/run/family_session.h"
#include "experiments/run/param_stores.h"
#include "experiments/run/problem.h"
#include "experiments/run/run_session.h"
#include "experiments/run/sim_workers.h"
#include "experiments/run/worker_loop.h"
#include "sim/core_pool.h"
#include "sim/network_model.h"
#include "sim/scheduler.h"
#include "sim/sim_collective.h"
#include "sim/sim_store.h"

namespace asgd::experiments {
namespace {

namespace alg = ::asgd::algorithms;
namespace col = ::asgd::collective;
using ::asgd::internal::StrCat;

// What simulated runs refuse, before anything is created: the strategies that cannot be
// simulated, --resume and checkpoints (simulated runs do not checkpoint) and a
// model.device other than cpu (the simulated workers share one thread). Throws
// ConfigError.
void CheckSimulable(const Config& config, const RunRequest& request,
                    const alg::Strategy& strategy) {
  if (!strategy.can_simulate) {
    std::string names;
    for (const alg::Strategy* s : alg::Strategies()) {
      if (!s->can_simulate) continue;
      names += names.empty() ? "" : ", ";
      names += s->name;
    }
    throw ConfigError("algorithm.name", strategy.name,
                      StrCat("a strategy that can be simulated with cluster.transport = sim (",
                             names, "); ", strategy.name,
                             strategy.shared_memory ? " shares memory and sends no messages"
                                                    : " is the sequential baseline"));
  }
  if (!request.resume_dir.empty()) {
    throw ConfigError("cluster.transport", "sim",
                      "inproc or memory for --resume (simulated runs do not checkpoint)");
  }
  for (const char* key : {"experiment.checkpoint_every_steps", "experiment.checkpoint_every_s"}) {
    if (config.Double(key) > 0) {
      throw ConfigError(key, config.Raw(key),
                        "0 with cluster.transport = sim (simulated runs do not checkpoint)");
    }
  }
  if (config.String("model.device") != "cpu") {
    throw ConfigError("model.device", config.String("model.device"),
                      "cpu with cluster.transport = sim (simulated workers share one thread)");
  }
}

// Rank w's handle on the control group, where RunCollectiveRank votes and, at a boundary,
// checks that the replicas agree and averages them (collective_rank.h). What a real run's
// training clock counts, this counts in virtual time:
//   - a vote (a 3-float maximum about every kVoteSteps steps, whatever is evaluated) takes
//     its time: the ranks of a real run pay it on their network too;
//   - the boundary's check and averages take none: they exist for the evaluation of θ̄ (or
//     the final one), which takes none either (the threads driver holds its clock while it
//     evaluates; its ranks' check on loopback before that costs microseconds, a simulated
//     ring 2(N−1) latencies); the ranks still wait there for the last one;
//   - the closing barrier takes its time.
// RunCollectiveRank asks hooks.eval_wanted last before each vote: the driver calls
// VoteNext there (SimRun::EvalWanted).
class ControlRank final : public col::Collective {
 public:
  ControlRank(sim::SimCollectiveGroup& group, int rank)
      : Collective(rank, group.size(), group.algorithm()),
        timed_(group.Rank(rank, true)),
        untimed_(group.Rank(rank, false)) {}

  // The next allreduce is a vote.
  void VoteNext() { vote_next_ = true; }

 protected:
  col::Traffic DoAllreduce(std::span<float> data, col::ReduceOp op) override {
    const bool vote = std::exchange(vote_next_, false);
    ASGD_CHECK(!vote || (data.size() == 3 && op == col::ReduceOp::kMax),
               "a vote is an allreduce of 3 floats by their maximum (collective_rank.cc)");
    (vote ? *timed_ : *untimed_).Allreduce(data, op);
    return col::ExpectedAllreduceBytes(algorithm(), rank(), size(), data.size());
  }
  col::Traffic DoBroadcast(std::span<float> data, int root) override {
    timed_->Broadcast(data, root);
    const uint64_t bytes = data.size_bytes();
    if (rank() == root) return {bytes * static_cast<uint64_t>(size() - 1), 0};
    return {0, bytes};
  }
  void DoBarrier() override { timed_->Barrier(); }
  void DoSend(int peer, std::span<const float> data, uint32_t tag) override {
    timed_->Send(peer, data, tag);
  }
  void DoRecv(int peer, std::span<float> data, uint32_t tag) override {
    timed_->Recv(peer, data, tag);
  }

 private:
  const std::unique_ptr<col::Collective> timed_, untimed_;
  bool vote_next_ = false;
};

// The peers of simulated workers, made when a family first asks: a SimStore on the
// network model (its messages' CPU on the cores), or two simulated groups on the same
// links (the strategy's traffic, its CPU on the cores; the control group, not counted).
class SimFabric final : public Fabric {
 public:
  SimFabric(const Problem& problem, RunSession& session, sim::Scheduler& sched,
            sim::CorePool& cores)
      : plan_(problem.plan), problem_(problem), session_(session), sched_(sched), cores_(cores) {
    controls_.resize(static_cast<std::size_t>(plan_.workers), nullptr);
  }

  std::unique_ptr<ps::ParamStore> NewStore(std::span<const float> initial) override {
    network_ = std::make_unique<sim::NetworkModel>(plan_.sim.network, plan_.workers, plan_.shards,
                                                   plan_.seed);
    StoreParts parts;
    parts.initial = initial;
    parts.staleness = session_.staleness();
    parts.scheduler = &sched_;
    parts.network = network_.get();
    std::unique_ptr<ps::ParamStore> store = NewParamStore(problem_, parts);
    auto* sim_store = dynamic_cast<sim::SimStore*>(store.get());
    ASGD_CHECK(sim_store != nullptr, "a simulated run's store is a SimStore");
    sim_store->ChargeTransportCpu(&cores_, plan_.sim.transport_cpu);
    return store;
  }
  std::unique_ptr<col::Collective> Payload(int w) override { return Groups().payload.Rank(w); }
  std::unique_ptr<col::Collective> Control(int w) override {
    auto rank = std::make_unique<ControlRank>(Groups().control, w);
    controls_[static_cast<std::size_t>(w)] = rank.get();
    return rank;
  }
  double StepTime() const override { return session_.Seconds(); }
  std::string GroupTransport() const override { return "sim"; }
  std::string DescribeGroup() const override {
    return StrCat("a simulated collective (", col::AlgorithmName(plan_.collective.algorithm), ")");
  }

  // Rank w's next control allreduce is a vote.
  void VoteNext(int w) {
    ControlRank* rank = controls_[static_cast<std::size_t>(w)];
    if (rank != nullptr) rank->VoteNext();
  }
  // Fails the operations of ranks waiting for a peer that failed, as a real collective
  // fails at its timeout.
  void Shutdown() {
    if (groups_ == nullptr) return;
    groups_->payload.Shutdown();
    groups_->control.Shutdown();
  }
  // provenance.json's account of the groups (none without them).
  void AddProvenance(std::map<std::string, std::string>& p) const {
    if (groups_ == nullptr) return;
    const auto secs = [](Duration d) { return CsvCell(std::chrono::duration<double>(d).count()); };
    const sim::SimCollectiveGroup& pay = groups_->payload;
    const sim::SimCollectiveGroup& ctl = groups_->control;
    p["sim_collective"] = std::string(col::AlgorithmName(plan_.collective.algorithm));
    p["sim_collective_operations"] = std::to_string(pay.stats().operations);
    p["sim_collective_time_s"] = secs(pay.stats().time);
    p["sim_collective_wait_s"] = secs(pay.stats().waited);
    p["sim_control_operations"] = std::to_string(ctl.stats().operations);
    p["sim_control_time_s"] = secs(ctl.stats().time);
  }

 private:
  struct Groups_ {
    Groups_(sim::Scheduler& sched, const RunPlan& plan)
        : payload(&sched, plan.sim.network, plan.workers, plan.collective.algorithm),
          control(&sched, plan.sim.network, plan.workers, plan.collective.algorithm) {}
    sim::SimCollectiveGroup payload;
    sim::SimCollectiveGroup control;
  };
  Groups_& Groups() {
    if (groups_ == nullptr) {
      groups_ = std::make_unique<Groups_>(sched_, plan_);
      // The transport's CPU (sim.transport_*), on the cores the steps use: the strategy's
      // messages only, not the control group's votes and checks.
      groups_->payload.ChargeHostCpu(&cores_, plan_.sim.transport_cpu);
    }
    return *groups_;
  }

  const RunPlan& plan_;
  const Problem& problem_;
  RunSession& session_;
  sim::Scheduler& sched_;
  sim::CorePool& cores_;
  std::unique_ptr<sim::NetworkModel> network_;  // a store's
  std::unique_ptr<Groups_> groups_;             // a group's
  std::vector<ControlRank*> controls_;          // not owned: each rank's, while it runs
};

// The workers as tasks of one scheduler (SimWorkers): what a simulated run adds to the
// run session, the same for both families. The session is told of every step as it
// happens in virtual time; evaluations run at once, in the task that reached them.
class SimRun final : public Pace {
 public:
  SimRun(const Problem& problem, RunSession& session, FamilySession& family, SimFabric& fabric,
         sim::Scheduler& sched, sim::CorePool& cores)
      : problem_(problem),
        session_(session),
        family_(family),
        fabric_(fabric),
        workers_(problem, sched, cores),
        scratch_(*problem.model) {
    const RunPlan& plan = problem.plan;
    for (int w = 0; w < plan.workers; ++w) {
      WorkerSetup ws = MakeWorkerSetup(problem, w);
      family.SetUp(w, ws);
      // sim.share_buffers: one model's scratch for all workers (they run one at a time), and
      // identical replicas held once; false: every worker owns its own.
      const bool share = plan.sim.share_buffers;
      if (share) ws.shared = &scratch_;
      // Simulated workers are tasks of one scheduler: a communication thread of their own
      // (collective.overlap) has no place among them, and the simulator does not model the
      // overlap (docs/simulator.md).
      ws.options.worker.overlap = false;
      if (share && plan.strategy->identical_replicas) {
        // One θ and optimizer for all ranks (algorithms::SharedReplica): the ranks run one
        // at a time, and their replicas would hold the same bits.
        if (replica_ == nullptr) {
          replica_ = std::make_unique<alg::SharedReplica>();
          replica_->optimizer = alg::NewOptimizer(ws.optimizer, problem.model->layout().size());
        }
        ws.shared_replica = replica_.get();
      }
      workers_.Add(std::move(ws));
    }
  }

  // Evaluates `point` at the current virtual instant (no virtual time passes).
  void Evaluate(const RunPoint& point, bool full) {
    RunCounters& c = session_.counters();
    const double t = session_.Seconds();
    EvalInput in = session_.CountersAt(point.samples);
    if (problem_.plan.ef_residual) in.ef_residual_norm = ResidualNorm(workers_.loops());
    family_.Annotate(point, in);
    if (session_.Evaluate(*problem_.model, point.params, in, t, full) &&
        session_.stop().stop_at_target() && !c.stop.load()) {
      c.stop.store(true);
      reason_ = session_.stop().TargetReason();
    }
    session_.eval_schedule().Evaluated(point.samples, t, full);
    session_.staleness()->Flush();
  }

  // Runs the workers to the end of the run. Returns the reason it ended (a failure's text
  // when failed()).
  std::string Run() {
    RunCounters& c = session_.counters();
    session_.eval_schedule().SetLastTime(session_.Seconds());
    workers_.Spawn(
        [this](int w, WorkerLoop& loop) { return family_.Work(w, loop, fabric_, *this); },
        [&c] { c.stop.store(true); });
    // Workers still blocked when nothing else can happen (a synchronous rule whose peers
    // stopped, ranks waiting for a peer that failed): the run is over; release them.
    workers_.Run([&] {
      c.stop.store(true);
      family_.Release();
      fabric_.Shutdown();
    });
    if (!workers_.failure().empty()) return workers_.failure();
    if (!reason_.empty()) return reason_;
    return session_.stop()
        .Check(c.samples.load(), c.steps.load(), session_.Seconds(),
               session_.recorder().time_to_target_s() >= 0)
        .value_or(session_.stop().TargetReason());
  }

  bool failed() const { return !workers_.failure().empty(); }
  std::vector<WorkerMetrics> Metrics() const { return workers_.Metrics(); }

  // Pace: what the workers ask.
  bool MayStep(double* lr_scale) override {
    return !LimitReached() && session_.WorkerMayStep(lr_scale);
  }
  void Stepped() override {
    if (LimitReached()) return;
    const int64_t samples = session_.counters().samples.load();
    if (family_.EvaluationDue(session_.eval_schedule(), samples, session_.Seconds())) {
      if (auto p = family_.ReadNow(samples)) Evaluate(*p, false);
    }
  }
  bool StopWanted() override { return LimitReached(); }
  // By seconds only (samples 0): the ranks hold themselves at the evaluations by epochs.
  int64_t EvalWanted(int w) override {
    fabric_.VoteNext(w);
    return session_.eval_schedule().Due(0, session_.Seconds()) ? 1 : 0;
  }
  bool CheckpointWanted() override { return false; }  // simulated runs do not checkpoint
  void AtPoint(const RunPoint& point) override {
    if (point.rank == 0 && point.evaluate) Evaluate(point, false);
  }

 private:
  // Whether the run is over; the first limit reached stops it, with its reason.
  bool LimitReached() {
    RunCounters& c = session_.counters();
    if (c.stop.load()) return true;
    if (auto why =
            session_.stop().Check(c.samples.load(), c.steps.load(), session_.Seconds(), false)) {
      c.stop.store(true);
      reason_ = *why;
    }
    return c.stop.load();
  }

  const Problem& problem_;
  RunSession& session_;
  FamilySession& family_;
  SimFabric& fabric_;
  SimWorkers workers_;  // on the cores of the gradients and the transport's CPU
  SharedWorkerScratch scratch_;
  std::unique_ptr<alg::SharedReplica> replica_;  // identical replicas' one θ (else null)
  std::string reason_;                           // set when a limit or the target stopped the run
};

}  // namespace

RunResult RunInSimulator(const Config& config, const RunRequest& request, std::ostream& out) {
  CheckSimulable(config, request, alg::FindStrategy(config.String("algorithm.name")));
  const std::string time_model = "virtual: " + DescribeTimeModel(config);
  const Problem problem = LoadProblem(config, request);
  const RunPlan& plan = problem.plan;
  sim::Scheduler sched(plan.sim.scheduler);
  const sim::VirtualClock clock(sched);
  SessionOptions options;
  options.clock = &clock;
  RunSession session(config, request, problem, options);
  const std::unique_ptr<FamilySession> family = NewFamilySession(problem, session);
  // The host's cores: the workers' steps and, with a transport charge, every message's CPU
  // at both ends (sim/sim_store.h, sim/sim_collective.h).
  sim::CorePool cores(plan.sim.cores);
  SimFabric fabric(problem, session, sched, cores);

  AlignedVector<float> initial(static_cast<std::size_t>(problem.n_params));
  family->Open(fabric, initial);
  session.training().Start();
  ASGD_LOG(kInfo, "run ", session.run().id(), ": ", plan.name, " with ", plan.workers,
           " simulated workers on ", family->Describe(fabric), " (", time_model, "), ",
           problem.model->Describe(), ", ", problem.data.train.name, " (",
           problem.data.train.num_examples, " examples)");

  SimRun run(problem, session, *family, fabric, sched, cores);
  // The initial parameters, at virtual time 0 (every rank of a group starts there).
  if (auto p = family->FirstPoint(initial, 0)) run.Evaluate(*p, false);
  const std::string reason = run.Run();
  const double end_s = session.Seconds();
  const bool failed = run.failed();
  const int64_t samples = session.counters().samples.load();
  if (!failed && session.eval_schedule().FinalNeeded(samples)) {
    if (auto p = family->FinalPoint(samples)) run.Evaluate(*p, true);
  }

  RunEnd end;
  end.time_s = end_s;
  end.samples = samples;
  end.reason = reason;
  end.failed = failed;
  family->Describe(end, fabric);
  end.time_model = time_model;
  end.time_digits = 3;
  end.time_unit = "virtual s";
  std::map<std::string, std::string> provenance = {
      {"simulated", "true"},
      {"time_model", time_model},
      {"sim_events", std::to_string(sched.events_run())},
      {"sim_core_wait_s", CsvCell(std::chrono::duration<double>(cores.waited()).count())}};
  fabric.AddProvenance(provenance);
  std::vector<WorkerMetrics> metrics = run.Metrics();
  family->Close();
  return session.Finish(*problem.model, family->LastParams(), end, std::move(metrics), provenance,
                        out);
}

}  // namespace asgd::experiments
