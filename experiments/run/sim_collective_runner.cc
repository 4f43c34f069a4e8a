#include "experiments/run/sim_collective_runner.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/optimizer.h"
#include "algorithms/schedule.h"
#include "algorithms/strategy.h"
#include "collective/collective.h"
#include "core/aligned.h"
#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "datasets/partition.h"
#include "experiments/config/setup.h"
#include "experiments/record/csv.h"
#include "experiments/record/metrics.h"
#include "experiments/record/progress.h"
#include "experiments/record/run_core.h"
#include "experiments/record/run_dir.h"
#include "experiments/run/collective_rank.h"
#include "experiments/run/collective_runner.h"
#include "experiments/run/evaluation.h"
#include "experiments/run/problem.h"
#include "experiments/run/run_session.h"
#include "experiments/run/sim_runner.h"
#include "experiments/run/sim_workers.h"
#include "experiments/run/worker_loop.h"
#include "sim/core_pool.h"
#include "sim/delay_model.h"
#include "sim/option_keys.h"
#include "sim/options.h"
#include "sim/scheduler.h"
#include "sim/sim_collective.h"

namespace asgd::experiments {
namespace {

namespace alg = ::asgd::algorithms;
namespace col = ::asgd::collective;
using ::asgd::internal::StrCat;

// What a simulated run on a collective refuses, before anything is created. Throws
// ConfigError.
void CheckSimulable(const Config& config, const RunRequest& request) {
  RefuseCurveOnCollective(config);
  RefuseWhatNoSimulationDoes(config, request);
  // Fair and interleaved sharing are the simulated store's network (sim/network_model.h);
  // the simulated collective times its own transfers and would silently ignore them.
  const std::string sharing(sim::keys::kSharing);
  if (sim::ParseNetworkSharing(config.Raw(sharing)) != sim::NetworkSharing::kFifo) {
    throw ConfigError(sharing, config.Raw(sharing),
                      "fifo for a strategy on a collective (fair and interleaved sharing are "
                      "modelled for parameter-server strategies only)");
  }
}

// Rank w's handle on the control group, where RunCollectiveRank votes and, at a boundary,
// checks that the replicas agree and averages them (collective_rank.h). What a real run's
// training clock counts, this counts in virtual time:
//   - a vote (a 3-float maximum about every kVoteSteps steps, whatever is evaluated) takes
//     its time: the ranks of a real run pay it on their network too;
//   - the boundary's check and averages take none: they exist for the evaluation of θ̄ (or
//     the final one), which takes none either (the thread runner holds its clock while it
//     evaluates; its ranks' check on loopback before that costs microseconds, a simulated
//     ring 2(N−1) latencies); the ranks still wait there for the last one;
//   - the closing barrier takes its time.
// RunCollectiveRank asks hooks.eval_wanted last before each vote: the driver calls
// VoteNext there.
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

// The ranks as tasks of one scheduler (SimWorkers), on two simulated groups (the strategy's
// traffic, and the votes and averages at the boundaries, not counted): what a simulated collective
// run adds to the run session.
class SimCollectiveRun {
 public:
  SimCollectiveRun(const Config& config, const Problem& problem, RunSession& session,
                   sim::Scheduler& sched, const CollectivePlan& plan,
                   std::span<const float> initial)
      : config_(config),
        problem_(problem),
        session_(session),
        sched_(sched),
        plan_(plan),
        initial_(initial),
        cores_(problem.plan.sim.cores),
        workers_(problem, sched, cores_),
        payload_(&sched, problem.plan.sim.network, problem.plan.workers,
                 problem.plan.collective.algorithm),
        control_(&sched, problem.plan.sim.network, problem.plan.workers,
                 problem.plan.collective.algorithm),
        scratch_(*problem.model) {
    // The transport's CPU (sim.transport_*), on the cores the steps use: the strategy's
    // messages only, not the control group's votes and checks.
    payload_.ChargeHostCpu(&cores_, problem.plan.sim.transport_cpu);
    for (int w = 0; w < problem.plan.workers; ++w) {
      WorkerSetup ws = MakeWorkerSetup(config, problem, w);
      // sim.share_buffers: one model's scratch for all ranks (they run one at a time), and
      // identical replicas held once; false: every rank owns its own, as a gloo rank does.
      const bool share = problem.plan.sim.share_buffers;
      if (share) ws.shared = &scratch_;
      ws.learning_rate = problem.plan.learning_rate;  // one rate: the replicas apply one step
      // Simulated ranks are tasks of one scheduler: a communication thread of their own
      // (collective.overlap) has no place among them, and the simulator does not model
      // the overlap (docs/simulator.md).
      ws.options.worker.overlap = false;
      if (share && problem.plan.strategy->identical_replicas) {
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

  // Evaluates `params` (the ranks' average) after `samples`, at the current virtual instant.
  void Evaluate(std::span<const float> params, double consensus, int64_t samples, bool full) {
    const double t = session_.Seconds();
    EvalInput in = session_.CountersAt(samples);
    in.updates = rounds_;
    in.consensus = consensus;
    if (session_.Evaluate(*problem_.model, params, in, t, full) &&
        session_.stop().stop_at_target() && !session_.counters().stop.load()) {
      session_.counters().stop.store(true);
      reason_ = session_.stop().TargetReason();
    }
    session_.eval_schedule().Evaluated(samples, t, full);
    session_.staleness()->Flush();
  }

  // Runs the ranks to the end of the run. Returns the reason it ended (a failure's text
  // when failed()).
  std::string Run() {
    RunCounters& c = session_.counters();
    CollectiveRankHooks hooks;
    hooks.stop_wanted = [&] {
      if (!c.stop.load()) {
        if (auto why = session_.stop().Check(c.samples.load(), c.steps.load(), session_.Seconds(),
                                             false)) {
          c.stop.store(true);
          reason_ = *why;
        }
      }
      return c.stop.load();
    };
    // By seconds only (samples 0): the ranks hold themselves at the evaluations by epochs.
    hooks.eval_wanted = [&]() -> int64_t {
      return session_.eval_schedule().Due(0, session_.Seconds()) ? 1 : 0;
    };
    hooks.boundary = [&](const CollectiveBoundary& b) {
      if (b.rank != 0) return;
      average_.assign(b.average.begin(), b.average.end());
      consensus_ = b.consensus;
      if (b.evaluate) Evaluate(b.average, b.consensus, b.samples, false);
    };
    workers_.Spawn(
        [&](int w, WorkerLoop& loop) {
          const std::unique_ptr<col::Collective> pay = payload_.Rank(w);
          ControlRank ctl(control_, w);
          CollectiveRankHooks mine = hooks;
          mine.eval_wanted = [&] {
            ctl.VoteNext();
            return hooks.eval_wanted();
          };
          mine.after_step = [&, w](const alg::StepResult& r, int64_t batch, int64_t step) {
            AfterStep(w, r, batch, step);
          };
          return RunCollectiveRank(loop, plan_, w, *pay, ctl, initial_, mine);
        },
        [&c] { c.stop.store(true); });
    // Ranks waiting for a peer that failed: their collective can never complete; fail it,
    // as a real one fails at its timeout.
    workers_.Run([&] {
      payload_.Shutdown();
      control_.Shutdown();
    });
    if (!workers_.failure().empty()) return workers_.failure();
    if (!reason_.empty()) return reason_;
    return session_.stop()
        .Check(c.samples.load(), c.steps.load(), session_.Seconds(),
               session_.recorder().time_to_target_s() >= 0)
        .value_or(session_.stop().TargetReason());
  }

  bool failed() const { return !workers_.failure().empty(); }
  int64_t rounds() const { return rounds_; }
  const std::vector<float>& average() const { return average_; }
  double consensus() const { return consensus_; }
  std::vector<WorkerMetrics> Metrics() const { return workers_.Metrics(); }
  // provenance.json's account of the simulation.
  std::map<std::string, std::string> Provenance(const std::string& time_model) const {
    const auto secs = [](Duration d) { return CsvCell(std::chrono::duration<double>(d).count()); };
    return {{"simulated", "true"},
            {"time_model", time_model},
            {"sim_collective", std::string(col::AlgorithmName(problem_.plan.collective.algorithm))},
            {"sim_collective_operations", std::to_string(payload_.stats().operations)},
            {"sim_collective_time_s", secs(payload_.stats().time)},
            {"sim_collective_wait_s", secs(payload_.stats().waited)},
            {"sim_control_operations", std::to_string(control_.stats().operations)},
            {"sim_control_time_s", secs(control_.stats().time)},
            {"sim_events", std::to_string(sched_.events_run())},
            {"sim_core_wait_s", secs(cores_.waited())}};
  }

 private:
  void AfterStep(int w, const alg::StepResult& r, int64_t batch, int64_t step) {
    session_.counters().AddStep(batch, r.local_steps, r.pushes, r.loss);
    // Rank 0's communication rounds: every rank takes part in every round, so these are
    // the run's rounds (the updates column), exact at rank 0's boundaries.
    if (w == 0) rounds_ += r.pushes;
    // No update is stale: each applies a gradient to the parameters it was computed on.
    ps::StalenessRecord rec;
    rec.worker = static_cast<uint32_t>(w);
    rec.step = step;
    rec.pulled_version = static_cast<uint64_t>(step - 1);
    rec.applied_version = rec.pulled_version;
    rec.wall_time_s = session_.Seconds();
    session_.staleness()->Record(rec);
  }

  const Config& config_;
  const Problem& problem_;
  RunSession& session_;
  sim::Scheduler& sched_;
  const CollectivePlan& plan_;
  std::span<const float> initial_;
  sim::CorePool cores_;
  SimWorkers workers_;  // on cores_
  sim::SimCollectiveGroup payload_;
  sim::SimCollectiveGroup control_;
  SharedWorkerScratch scratch_;
  std::unique_ptr<alg::SharedReplica> replica_;  // identical replicas' one θ (else null)
  int64_t rounds_ = 0;
  std::vector<float> average_;  // the last boundary's θ̄ (rank 0 publishes it)
  double consensus_ = 0;        // and its consensus distance
  std::string reason_;          // set when the driver stopped the run
};

}  // namespace

RunResult RunSimulatedCollective(const Config& config, const RunRequest& request,
                                 std::ostream& out) {
  CheckSimulable(config, request);
  const std::string time_model = "virtual: " + DescribeTimeModel(config);
  const Problem problem = LoadProblem(config, request);
  const RunPlan& rp = problem.plan;
  const CollectivePlan plan =
      CollectivePlan::Make(rp, problem.strategy_options, problem.partitions,
                           problem.data.train.num_examples);
  sim::Scheduler sched(rp.sim.scheduler);
  const sim::VirtualClock clock(sched);
  SessionOptions options;
  options.clock = &clock;
  RunSession session(config, request, problem, options);
  AlignedVector<float> initial(static_cast<std::size_t>(problem.n_params));
  problem.model->Initialize(initial, DeriveSeed(rp.seed, "init"));
  SimCollectiveRun run(config, problem, session, sched, plan, initial);
  session.training().Start();
  ASGD_LOG(kInfo, "run ", session.run().id(), ": ", rp.name, " with ", rp.workers,
           " simulated workers on a simulated collective (",
           col::AlgorithmName(rp.collective.algorithm), "; ", time_model, "), ",
           problem.model->Describe(), ", ", problem.data.train.name, " (",
           problem.data.train.num_examples, " examples)");

  run.Evaluate(initial, 0.0, 0, false);  // every rank starts here (the broadcast)
  session.eval_schedule().SetLastTime(session.Seconds());
  const std::string reason = run.Run();
  const double end_s = session.Seconds();
  const bool failed = run.failed();
  const int64_t samples = session.counters().samples.load();
  // The ranks published their final average when they voted to stop.
  if (!failed) run.Evaluate(run.average(), run.consensus(), samples, true);

  RunEnd end;
  end.time_s = end_s;
  end.samples = samples;
  end.updates = run.rounds();
  end.reason = reason;
  end.failed = failed;
  end.ps_shards = 0;
  end.transport = "sim";
  end.time_model = time_model;
  end.time_digits = 3;
  end.time_unit = "virtual s";
  end.updates_word = "communication rounds";
  end.staleness_word = "worker steps";
  char tail[64];
  std::snprintf(tail, sizeof(tail), "; consensus distance %.3g", run.consensus());
  end.tail = tail;
  return session.Finish(*problem.model, run.average(), end, run.Metrics(),
                        run.Provenance(time_model), out);
}

}  // namespace asgd::experiments
