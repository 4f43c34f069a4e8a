// What differs between the strategy families (algorithms::Family) in a run of workers,
// behind one interface chosen once from the plan's family (NewFamilySession), so that each
// executor is written once for both (threads: threads_driver.cc; the simulator:
// sim_driver.cc):
//
//   store  the workers push to and pull from a store (ps/param_store.h) that the session
//          builds on the executor's fabric and restores on resume; its parameters (the
//          centre) can be read at any time, so the driver evaluates and checkpoints when
//          its own schedule says, holding the workers' next steps (Pace::MayStep);
//   group  the workers are ranks of a collective (collective_rank.h) that start from
//          rank 0's parameters (a resumed run: its checkpoint's average) and agree at
//          round boundaries when to stop and when to be read: the driver's wishes
//          (Pace::StopWanted, EvalWanted, CheckpointWanted) reach them at their next vote,
//          and the workers' average is readable only at the boundary they reach together
//          (Pace::AtPoint).
//
// The executor brings what depends on how its workers run: the Fabric (how a store is
// built and how a rank connects: threads over inproc shards and gloo on loopback, the
// simulator over a SimStore and simulated groups) and the Pace (its answers to the
// workers: whether a worker may step, what the driver wants at a vote, what it does at a
// point). A run as processes (experiments/cluster) has the same two sides: its
// coordinator's replies are a Pace and its roles' connections a Fabric. A worker process
// runs one worker and keeps no record (its coordinator does, from its reports), so it has
// no RunSession and no session: it runs what the session's Work runs, without the
// session's record, on the process's pace (the coordinator's budgets and orders) and
// peers: a store's worker WorkAsStoreWorker over its client of the shard servers, a
// group's rank WorkAsRank over the rendezvous folder's gloo groups (rank 0 answers the
// coordinator's orders by RunPoint::eval_id). experiments/cluster/worker_role.cc.
//
// Thread safety: Work runs on each worker's thread (or task); the rest on the driver's
// thread. A group's last published average (LastParams) is written by rank 0 before it
// calls Pace::AtPoint and read by the driver while every rank waits there or after the
// workers ended.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "algorithms/exchange.h"
#include "algorithms/strategy.h"
#include "collective/collective.h"
#include "experiments/record/run_end.h"
#include "experiments/run/collective_rank.h"
#include "experiments/run/param_stores.h"
#include "experiments/run/problem.h"
#include "experiments/run/run_session.h"
#include "experiments/run/worker_loop.h"
#include "ps/param_store.h"

namespace asgd::experiments {

// A point where the driver reads the run's parameters: an evaluation, a checkpoint or the
// end. For a group, a round boundary every rank reached (one point per rank; rank 0's
// carries the average); for a store, the centre read by the driver.
struct RunPoint {
  int rank = 0;
  std::span<const float> params;  // valid until the workers go on
  int64_t samples = 0;            // the training samples the parameters are seen after
  int64_t step = 0;               // a group's steps per rank (a checkpoint's version)
  bool final = false;             // the workers stop here
  bool evaluate = false;          // the workers agreed on an evaluation here
  bool checkpoint = false;        // ... and on a checkpoint
  // A group's largest evaluation id wanted at the vote (0: none, or one by epochs): a
  // worker process answers its coordinator's order by it (EvalWanted's ids).
  int64_t eval_id = 0;
  double consensus = std::numeric_limits<double>::quiet_NaN();  // a group's (1/N)·Σ‖θ_i − θ̄‖²
};

// How an executor builds its workers' peers. A session calls what its family needs.
class Fabric {
 public:
  virtual ~Fabric() = default;
  // The store of the plan (NewParamStore) over `initial`, on this executor's clock.
  virtual std::unique_ptr<ps::ParamStore> NewStore(std::span<const float> initial) = 0;
  // Rank w's groups, on w's thread or task: the strategy's traffic (counted in workers.csv)
  // and the control group of the votes and averages (not counted). Throws CollectiveError.
  virtual std::unique_ptr<collective::Collective> Payload(int w) = 0;
  virtual std::unique_ptr<collective::Collective> Control(int w) = 0;
  // The time of a worker's step in staleness.csv (a group's staleness-0 rows).
  virtual double StepTime() const = 0;
  // What the summary's transport column names for a group ("gloo-ring", "sim"), and the
  // log line's words for it.
  virtual std::string GroupTransport() const = 0;
  virtual std::string DescribeGroup() const = 0;
};

// The executor's answers to its workers, asked by the session's Work.
class Pace {
 public:
  virtual ~Pace() = default;
  // Before a store worker's step: false ends its loop (the run stopped, or its limits
  // allow no more steps); else *lr_scale is the schedule's factor for the step, at the
  // run's samples. The threads executor holds the worker here while it reads the centre.
  virtual bool MayStep(double* lr_scale) = 0;
  // A store worker's request failed with `st`: true once the run may go on (a lost shard
  // was restarted and restored; the worker then starts again from a fresh read of the
  // centre), false to end the worker with the failure. In one process no shard is
  // restarted: false.
  virtual bool Recover(const ps::Status& /*st*/) { return false; }
  // After any worker's step, once the session counted it.
  virtual void Stepped() = 0;
  // Whether the run is stopping: at a group's vote (collective_rank.h), the rank's wish to
  // stop.
  virtual bool StopWanted() = 0;
  // A store worker's request was not answered (the store closed a synchronous round, or
  // it timed out or aborted): whether that is the run's end, which ends the worker
  // quietly, not as a failure. StopWanted, unless the executor can ask: a worker process
  // asks its coordinator when it has not heard of a stop yet (its shards may close before
  // the reply that tells it so reaches it).
  virtual bool Ended() { return StopWanted(); }
  // At a group's vote: an evaluation id (> 0: wanted, w the asking rank); a checkpoint.
  virtual int64_t EvalWanted(int w) = 0;
  virtual bool CheckpointWanted() = 0;
  // At a group's boundary, on every rank (rank 0 published its average first).
  virtual void AtPoint(const RunPoint& point) = 0;
};

class FamilySession {
 public:
  virtual ~FamilySession() = default;

  // Before the workers: the parameters they start from (`initial`, of the model's size:
  // fresh from the seed, or a resumed group run's checkpoint) and a store's store on the
  // fabric (a resumed run's restored). Throws DataError (a checkpoint that does not fit).
  virtual void Open(Fabric& fabric, std::span<float> initial) = 0;
  // The log line's "on ...": where the workers' parameters meet.
  virtual std::string Describe(const Fabric& fabric) const = 0;
  // Worker w's setup, what the family changes in it.
  virtual void SetUp(int w, WorkerSetup& setup) const = 0;
  // A step of experiment.checkpoint_every_steps in pushes (RunSession::StartCheckpoints).
  virtual int64_t PushesPerStep() const = 0;

  // Worker w's loop over its peers, until the run or the worker ends; counts its steps in
  // the session. Any thread or task, one per worker.
  virtual WorkerOutcome Work(int w, WorkerLoop& loop, Fabric& fabric, Pace& pace) = 0;

  // The first row's point, after `samples` (a resumed run's): the starting parameters
  // (the store's centre; none for a resumed group run: its checkpoint's rows end there).
  virtual std::optional<RunPoint> FirstPoint(std::span<const float> initial, int64_t samples) = 0;
  // Whether the driver's schedule asks for an evaluation now (a group's ranks hold
  // themselves for those by samples: only the time part is the driver's).
  virtual bool EvaluationDue(EvalSchedule& schedule, int64_t samples, double seconds) const = 0;
  // The parameters now, if they can be read outside a point (the store's centre, read
  // into the session's buffer); nullopt for a group.
  virtual std::optional<RunPoint> ReadNow(int64_t samples) = 0;
  // The point of the end, after the workers ended: the centre read (none if the read
  // failed: the session's counters say so), or the average the ranks published when they
  // stopped.
  virtual std::optional<RunPoint> FinalPoint(int64_t samples) = 0;
  // The last parameters read or published (final_model.pt).
  virtual std::span<const float> LastParams() const = 0;
  // What an evaluation row of `point` adds to the session's counters (a group's rounds
  // and consensus distance).
  virtual void Annotate(const RunPoint& point, EvalInput& in) const = 0;
  // Saves a checkpoint: the store's shards with the counters they contain, or a group's
  // average at `point` (REQUIRED then). `loops` give the workers' metrics.
  virtual void SaveCheckpoint(const RunPoint* point,
                              std::span<const std::unique_ptr<WorkerLoop>> loops) = 0;
  // After the run decided to stop: releases workers a synchronous store holds in a round.
  virtual void Release() = 0;
  // The end's account: updates, transport and the words of the last line.
  virtual void Describe(RunEnd& end, const Fabric& fabric) const = 0;
  // Before the session finishes: the store and its clients go.
  virtual void Close() = 0;
};

// What an executor records of a worker besides its pace (both optional): `point` at
// each of a group's boundaries, before Pace::AtPoint; `step` after each step, before
// Pace::Stepped, with the worker's step count (a group's: the steps every rank took).
struct WorkerRecord {
  std::function<void(const RunPoint&)> point;
  std::function<void(const algorithms::StepResult&, int64_t batch, int64_t step)> step;
};

// A store worker's loop (the worker its setup names) over `exchange`, its store's
// exchange, which outlives the call: its steps allowed, its rate scaled and its failures
// recovered by the pace. StoreSession::Work is this with the session's record; a worker
// process (experiments/cluster) runs it over its client of the shard servers. Returns the
// failure, naming the worker.
WorkerOutcome WorkAsStoreWorker(WorkerLoop& loop, algorithms::Exchange& exchange, Pace& pace,
                                const WorkerRecord& record);

// Rank w of a group on the fabric's groups (Payload, Control), from `initial`, its wishes
// and points through the pace. GroupSession::Work is this with the session's record; a
// worker process (experiments/cluster) runs it without a RunSession: its coordinator keeps
// the record from the process's reports. Returns the failure, naming the worker.
WorkerOutcome WorkAsRank(const CollectivePlan& plan, int w, WorkerLoop& loop, Fabric& fabric,
                         Pace& pace, std::span<const float> initial, const WorkerRecord& record);

// The session of problem.plan.family (the store or the group family). REQUIRES: not the
// sequential baseline. problem and session outlive it.
std::unique_ptr<FamilySession> NewFamilySession(const Problem& problem, RunSession& session);

}  // namespace asgd::experiments
