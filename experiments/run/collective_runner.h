// Running a strategy on a collective (Strategy::collective: allreduce_sgd, local_sgd,
// dpsgd) in one process: one thread per worker, each a rank of a gloo group over TCP on
// 127.0.0.1 that meets through an in-memory store (collective/collective.h says why
// loopback TCP rather than a shortcut). There is no parameter server: the main thread
// evaluates the average of the workers' parameters.
//
// Agreement. A collective needs every worker to take the same steps, so the workers
// decide together, at every round boundary (Strategy::steps_per_round), whether to stop
// or to be held for an evaluation: a 3-float allreduce (the maximum of the votes, see
// collective_rank.h) on a second gloo group, the control group, whose traffic is not the strategy's and is not counted in
// workers.csv. When the vote says stop or hold, the workers average their parameters and
// their squared distance from that average on the control group and rank 0 hands both to
// the evaluator; on hold every worker waits until the evaluation is done (held training
// time, as in the thread runner).
#pragma once

#include <iosfwd>
#include <string>

#include "experiments/config/config.h"
#include "experiments/record/checkpoint.h"
#include "experiments/run/runner.h"

namespace asgd::experiments {

// Writes the run folder as RunParallel does: convergence.csv (the workers' average; its
// consensus_distance column is (1/N)·Σ‖θ_i − θ̄‖²), staleness.csv (one staleness-0 row
// per worker step: no update is stale by construction), workers.csv (bytes_pushed and
// bytes_pulled are the payload each worker sent and received through the collective),
// summary.csv. One rank's round logic is RunCollectiveRank (collective_rank.h), which the
// worker processes share. Throws ConfigError before training for what this driver does
// not do (cluster.curve: gloo's TCP is not encrypted) and for bad configuration or data.
// A failed worker (a NaN loss, a peer that died or did not answer within
// collective.timeout_ms) ends the run with the CSVs kept, one line naming it and
// exit_status 2.
//
// Checkpoints (experiment.checkpoint_every_steps / _s): the main thread asks, the workers
// hold at their next vote, and the average θ̄ is saved (checkpoint.h's format, one shard:
// θ̄, version = the steps every worker took) with exact counters and CSV rows; one more when
// the run finishes. request.resume_dir: the newest valid checkpoint is broadcast to every
// worker (CheckCollectiveCheckpoint), the counters and CSVs continue, each worker's sampler
// skips the batches it drew, and no row is added at the start. Bit for bit with the
// uninterrupted run when the replicas agree at the checkpoint (allreduce_sgd; local_sgd at
// its boundaries) and the optimizer has no state (plain SGD): optimizer slots are not
// saved, and dpsgd's workers resume from their average.
RunResult RunCollective(const Config& config, const RunRequest& request, std::ostream& out);

// A checkpoint of a run on a collective holds one shard, the workers' average at a round
// boundary, its version the steps every worker had taken. Throws DataError (naming the
// checkpoint's folder) for another shard count or parameter count.
void CheckCollectiveCheckpoint(const LoadedCheckpoint& checkpoint, int64_t n_params);

// Throws ConfigError (cluster.curve) when the config asks for CURVE with a strategy on a
// collective: CURVE covers ZeroMQ, not gloo's TCP connections between workers.
void RefuseCurveOnCollective(const Config& config);
// For a process of a multi-process run in `role` ("coordinator", "ps", "worker",
// "evaluator"): throws ConfigError when the config's strategy runs on a collective and
// asks for CURVE (cluster.curve), or the role is one such a run does not have (ps,
// evaluator: algorithm.name). Nothing for the other strategies.
void RefuseCollectiveRole(const Config& config, const std::string& role);

}  // namespace asgd::experiments
