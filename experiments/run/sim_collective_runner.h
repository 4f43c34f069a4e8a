// A simulated run of a strategy on a collective (cluster.transport = sim with
// allreduce_sgd, local_sgd or dpsgd; issue 33): algorithm.workers ranks in one OS thread,
// in virtual time. Each rank is a task of a sim::Scheduler running what a worker thread of
// the thread runner (collective_runner.h) runs — RunCollectiveRank (collective_rank.h:
// the votes, the boundaries, the real worker rule in a WorkerLoop) — on a
// sim::SimCollectiveGroup instead of gloo (sim/sim_collective.h): the same values bit for
// bit (gloo's reduction order is replayed), the same byte counters, and the time of each
// collective call from the network model, starting when the last rank arrived (a
// straggler holds a synchronous round back). The control group (the votes and averages at
// the boundaries) is a second simulated group on the same links, not counted in
// workers.csv, as in the thread runner.
//
// After each gradient a rank sleeps the delay model's step time ([delay]; shared cores:
// sim.cores), as in the simulated parameter-server runs. Evaluations run in rank 0's task
// at the boundary where they are due, at that virtual instant (no virtual time passes, no
// rank is held); evaluations by seconds (metrics.eval_every_s) and the time limit
// (experiment.max_time_s) count virtual seconds and reach the ranks at their next vote.
// The training clock counts what a real run's counts: the votes (about every kVoteSteps
// steps, whatever is evaluated) take their collective's time on the control group, as
// they take a real network's; the boundary's check that the replicas agree and its
// averages, done only for an evaluation (or the final one), take none, like the
// evaluation itself (the thread runner holds its clock while it evaluates), though the
// ranks still meet there. So how often a run evaluates does not change its training time.
//
// The run folder is that of the other simulated runs (sim_runner.h): convergence.csv with
// the consensus distance (1/N)·Σ‖θ_i − θ̄‖², staleness.csv (one staleness-0 row per worker
// step), workers.csv (bytes: the payload each rank sent and received), summary.csv with
// transport = sim and time_model = "virtual: ...", provenance.json with simulated = true,
// the gloo algorithm whose schedule was simulated, the time spent in the strategy's
// collectives (sim_collective_*) and on the control group (sim_control_*: the votes and
// the closing barrier).
//
// Determinism: with a compute model other than `measured`, the same config and seed give
// byte-identical CSVs.
//
// Not supported (ConfigError naming the key): checkpoints and --resume, CUDA workers,
// cluster.curve.
#pragma once

#include <iosfwd>

#include "experiments/config/config.h"
#include "experiments/run/runner.h"

namespace asgd::experiments {

// Throws ConfigError/DataError before training; a failure during training (a NaN loss)
// ends the run with the CSVs kept, one line naming the worker and exit_status 2.
RunResult RunSimulatedCollective(const Config& config, const RunRequest& request,
                                 std::ostream& out);

}  // namespace asgd::experiments
