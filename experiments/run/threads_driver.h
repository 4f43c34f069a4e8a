// Running a distributed strategy in one process, on worker threads (ThreadWorkers), for both
// strategy families (family_session.h):
//   store  W worker threads against shard servers over inproc:// (the default; the same
//          transport code as across machines), against the in-memory store, or, for
//          hogwild, against one shared vector; the main thread evaluates the centre on a
//          schedule while the workers run, holding their next steps while it reads it;
//   group  (allreduce_sgd, local_sgd, dpsgd) one thread per worker, each a rank of a gloo
//          group over TCP on 127.0.0.1 that meets through an in-memory store
//          (collective/collective.h says why loopback TCP rather than a shortcut). There is
//          no parameter server: the main thread evaluates the average of the workers'
//          parameters at the round boundaries where the ranks agreed to be read
//          (collective_rank.h: a vote on a second gloo group, the control group, whose
//          traffic is not counted in workers.csv), while every rank waits there (held
//          training time).
// The main thread decides the time limit, the evaluations by seconds and the checkpoints;
// a group's ranks learn them at their next vote.
#pragma once

#include <iosfwd>

#include "experiments/config/config.h"
#include "experiments/run/runner.h"

namespace asgd::experiments {

// Writes, besides config.ini and provenance.json, convergence.csv (the centre's, or the
// workers' average's, test loss and accuracy over time; a group's consensus_distance column
// is (1/N)·Σ‖θ_i − θ̄‖²), staleness.csv (one row per applied push per shard; a group's: one
// staleness-0 row per worker step), workers.csv (a group's bytes_pushed and bytes_pulled are
// the payload each worker sent and received through the collective) and summary.csv.
// Throws ConfigError/DataError before training; problems during training (a NaN loss, a
// store that stops answering, a peer that died or did not answer within
// collective.timeout_ms) end the run with the CSVs kept, one line naming it and
// exit_status 2.
//
// Checkpoints (experiment.checkpoint_every_steps / _s): a store's shards are snapshotted
// while the workers run; a group's ranks hold at their next vote and their average θ̄ is
// saved (checkpoint.h's format, one shard: θ̄, version = the steps every worker took). One
// more when the run finishes. request.resume_dir: the newest valid checkpoint is restored
// into the store, or broadcast to every rank (CheckCollectiveCheckpoint; each worker's
// sampler skips the batches it drew, and no row is added at the start). A group's resumed
// run is bit for bit the uninterrupted one when the replicas agree at the checkpoint
// (allreduce_sgd; local_sgd at its boundaries) and the optimizer has no state (plain SGD):
// optimizer slots are not saved, and dpsgd's workers resume from their average.
RunResult RunOnThreads(const Config& config, const RunRequest& request, std::ostream& out);

}  // namespace asgd::experiments
