// A training run as separate processes (docs/architecture.md#roles-and-processes): one
// coordinator, one process per
// parameter-server shard, one per worker and optionally an evaluator, placed by hand
// (`asgd coordinator|ps|worker|evaluator --config C --task I`), by `asgd launch`, or by
// a cluster manager (TF_CONFIG, SLURM, Open MPI: `asgd task`).
//
// The roles talk to the coordinator over a control channel (transport/control.h) with
// the typed messages of control_protocol.h (MessagePack, versioned, validated on
// decode: a malformed message is refused with one line, never trusted); every role
// reports every cluster.report_interval_s, which is also its heartbeat. The coordinator:
//   - waits until every ps, worker (and the evaluator) registered, then lets the workers
//     start; a role that never registers within cluster.timeout_s fails the run;
//   - adds up the workers' progress (samples, steps, pushes, losses, times, bytes),
//     decides when to evaluate (the evaluator, or itself, pulls the centre) and when to
//     stop (epochs, max_steps, max_time_s, target accuracy; a NaN loss or a failed role);
//   - collects the shards' staleness records;
//   - ends the run: workers stop (synchronous strategies: the shards are closed first so
//     no worker waits for a round), a final evaluation on the whole test set, then the
//     shards stop; and writes the run folder exactly as `asgd run` does (results/README.md).
// A role silent for cluster.heartbeat_timeout_s fails the run (exit 2, every CSV kept).
//
// Every process derives the model, its layout, the initial parameters (from the seed),
// the placement and the strategy's options from the same config, so they agree without
// exchanging them; shard sizes are checked at registration with the servers.
//
// Where the code is: cluster_common.{h,cc} (the setup, the link to the coordinator, the
// centre's evaluation), coordinator.{h,cc} and coordinator_phases.cc with the families'
// parts in coordinator_store.cc and coordinator_group.cc, ps_role.cc, evaluator_role.cc,
// and the worker, written once (worker_process.h, worker_role.cc) with its families' parts
// in worker_store.cc and worker_group.cc. A strategy on a collective has no shards and no
// evaluator: the workers are the ranks of a gloo group and rank 0 evaluates their
// average; a lost rank fails the run.
#pragma once

#include <iosfwd>

#include "experiments/cluster/roles.h"
#include "experiments/config/config.h"

namespace asgd::experiments {

// The coordinator of a multi-process training run. Returns the exit status: 0 when the
// run completed, 2 when it failed (a role failed or went silent, a NaN loss).
int RunCoordinatorRole(const Config& config, const RoleRequest& request, std::ostream& out);

// A parameter-server shard of a training run (`asgd ps` with a training strategy).
int RunTrainingPsRole(const Config& config, const RoleRequest& request, std::ostream& out);

// A worker of a training run (`asgd worker` with a training strategy), of either family.
int RunTrainingWorkerRole(const Config& config, const RoleRequest& request, std::ostream& out);

// The evaluator: pulls the centre when the coordinator asks and evaluates it.
int RunEvaluatorRole(const Config& config, const RoleRequest& request, std::ostream& out);

}  // namespace asgd::experiments
