// A simulated cluster (cluster.transport = sim, issue 13): algorithm.workers workers and
// cluster.shards shard servers in one OS thread, in virtual time. Each worker is a task
// of a sim::Scheduler running the real worker loop (WorkerLoop, the strategy's worker
// rule) against a SimParamClient; the shards are a SimStore running the strategy's real
// server rules (sim/sim_store.h). Gradients are computed for real on real data;
// only time is simulated: after each gradient the worker sleeps the step time of the
// delay model ([delay]: measured CPU time x scale, constant, or a distribution, with
// stragglers and pauses), and every store call travels the network model ([network]).
// The steps take a core of sim.cores (sim/core_pool.h) and, with sim.transport_* set, so
// does every message's CPU at both of its ends (sim/sim_store.h); provenance.json's
// sim_core_wait_s is the time all of them waited for a core.
//
// The run core is the other drivers': RunRecorder, StopPolicy, EvalSchedule, and a
// TrainingClock on the virtual clock, so every time in the run folder (convergence.csv's
// time_s, staleness.csv's time_s, summary.csv's wall_time_s and time_to_target_s,
// workers.csv's times) is virtual seconds. Evaluations run inside the worker task whose
// step made them due, at that virtual instant: virtual time does not pass while they
// run, so no worker is held and nothing is taken out of the training time. Limits by time
// (experiment.max_time_s, metrics.eval_every_s) count virtual seconds and are checked at
// step boundaries (a worker may finish the step it is in).
//
// summary.csv says transport = sim and time_model = "virtual: <the model>";
// provenance.json adds simulated = true, time_model, and the scheduler's event count.
//
// Determinism: with a compute model other than `measured`, the same config and seed
// give byte-identical CSVs (every choice comes from the seed and the scheduler's tie
// rule). With `measured` the step times are this machine's CPU times, so they vary.
//
// Not supported (ConfigError naming the key): strategies whose trait can_simulate is
// false (hogwild, sgd), checkpoints and --resume, CUDA workers.
#pragma once

#include <iosfwd>

#include "experiments/config/config.h"
#include "experiments/run/runner.h"

namespace asgd::experiments {

// Throws ConfigError/DataError before training; a failure during training (a NaN loss)
// ends the run with the CSVs kept and exit_status 2.
RunResult RunSimulated(const Config& config, const RunRequest& request, std::ostream& out);

// What every simulated run refuses (the parameter server's and the collectives'), before
// anything is created: --resume and checkpoints (simulated runs do not checkpoint) and a
// model.device other than cpu (the simulated workers share one thread). Throws ConfigError.
void RefuseWhatNoSimulationDoes(const Config& config, const RunRequest& request);

}  // namespace asgd::experiments
