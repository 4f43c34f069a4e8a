// A simulated cluster (cluster.transport = sim, issues 13 and 33), for both strategy
// families (family_session.h): algorithm.workers workers in one OS thread, in virtual
// time, each a task of a sim::Scheduler (SimWorkers) running the real worker loop
// (WorkerLoop, the strategy's worker rule) on real data; only time is simulated. After
// each gradient a worker sleeps the step time of the delay model ([delay]: measured CPU
// time x scale, constant, or a distribution, with stragglers and pauses) on a core of
// sim.cores (sim/core_pool.h); provenance.json's sim_core_wait_s is the time the steps
// and the messages' CPU (sim.transport_*) waited for a core.
//
//   store  cluster.shards shard servers as a SimStore running the strategy's real server
//          rules (sim/sim_store.h); every store call travels the network model
//          ([network]) and, with sim.transport_* set, takes a core at both of its ends.
//   group  (allreduce_sgd, local_sgd, dpsgd) each rank runs what a worker thread of the
//          threads driver runs — RunCollectiveRank (collective_rank.h: the votes, the
//          boundaries) — on a sim::SimCollectiveGroup instead of gloo
//          (sim/sim_collective.h): the same values bit for bit (gloo's reduction order is
//          replayed), the same byte counters, and the time of each collective call from
//          the network model, starting when the last rank arrived (a straggler holds a
//          synchronous round back). The control group (the votes and averages at the
//          boundaries) is a second simulated group on the same links, not counted in
//          workers.csv. Its training clock counts what a real run's counts: the votes
//          (about every kVoteSteps steps) take their collective's time; the boundary's
//          check that the replicas agree and its averages, done only for an evaluation
//          (or the final one), take none, like the evaluation itself, though the ranks
//          still meet there. So how often a run evaluates does not change its training
//          time. provenance.json adds the gloo algorithm whose schedule was simulated, the
//          time spent in the strategy's collectives (sim_collective_*) and on the control
//          group (sim_control_*: the votes and the closing barrier).
//
// The run core is the other drivers': RunRecorder, StopPolicy, EvalSchedule, and a
// TrainingClock on the virtual clock, so every time in the run folder (convergence.csv's
// time_s, staleness.csv's time_s, summary.csv's wall_time_s and time_to_target_s,
// workers.csv's times) is virtual seconds. Evaluations run inside the worker task whose
// step made them due (a store's), or in rank 0's task at the boundary where they are due
// (a group's), at that virtual instant: virtual time does not pass while they run, so no
// worker is held and nothing is taken out of the training time. Limits by time
// (experiment.max_time_s, metrics.eval_every_s) count virtual seconds; a store's workers
// see them at their step boundaries (a worker may finish the step it is in), a group's
// ranks at their next vote.
//
// summary.csv says transport = sim and time_model = "virtual: <the model>";
// provenance.json adds simulated = true, time_model, and the scheduler's event count.
// A group's convergence.csv has the consensus distance (1/N)·Σ‖θ_i − θ̄‖², its
// staleness.csv one staleness-0 row per worker step, its workers.csv the payload each rank
// sent and received.
//
// Determinism: with a compute model other than `measured`, the same config and seed
// give byte-identical CSVs (every choice comes from the seed and the scheduler's tie
// rule). With `measured` the step times are this machine's CPU times, so they vary.
//
// Not supported (ConfigError naming the key): strategies whose trait can_simulate is
// false (hogwild, sgd), checkpoints and --resume, CUDA workers; for a group, cluster.curve
// and a network.sharing other than fifo (run_plan.h).
#pragma once

#include <iosfwd>

#include "experiments/config/config.h"
#include "experiments/run/runner.h"

namespace asgd::experiments {

// Throws ConfigError/DataError before training; a failure during training (a NaN loss)
// ends the run with the CSVs kept, one line naming the worker and exit_status 2.
RunResult RunInSimulator(const Config& config, const RunRequest& request, std::ostream& out);

}  // namespace asgd::experiments
