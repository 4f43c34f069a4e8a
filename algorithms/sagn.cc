// sagn — synchronous AGN (TFG's SAGN/"SDAG", docs/algorithms.md#sagn).
//
// Worker: as AGN, W local optimizer steps accumulating a, then push a/W (the AGN/dist-keras
// convention rather than TFG's mean of raw gradients) as a push-pull that returns with the
// new centre once the round is complete. Server (SyncRule): the mean (algorithm.aggregation
// = sum: the sum) of the first N fresh window-averages, one version per round; TFG's
// server-side Adam is not applied (the server adds; use a local adam for TFG's local
// side). SAGN(W = 1) ≡ sync_sgd; SAGN with one worker ≡ AGN. Staleness: 0 by
// construction; stale pushes of backup workers are dropped and counted.
//
// The local optimizer steps are part of the algorithm (Hermans), so the optimizer state
// stays on the worker. When a worker's window is dropped (N < workers), the push-pull
// still replaces its parameters by the new centre, but its optimizer state is kept as is:
// a momentum velocity or Adam moments still hold the dropped window's gradients and carry
// them into the next window. Only the window's update is lost, not its optimizer history.
//
// Compression (compression.name, issue 17): meaningful: the push is a window update; a round
// aggregates the decoded pushes.
#include "algorithms/builtin_strategies.h"
#include "algorithms/sync_rule.h"
#include "algorithms/windowed_worker.h"

namespace asgd::algorithms {

Strategy SagnStrategy() {
  Strategy s;
  s.name = "sagn";
  s.supports_compression = true;
  s.description = "synchronous AGN: mean of N window-normalised pushes per round";
  s.rounds = true;
  s.keys = ReadKeys(kOptimizerKeys | kScheduleKeys, {"algorithm.window"});
  s.settings = {ReplicasSetting(), AggregationSetting()};
  s.synchronous = true;
  s.worker_rule = [](const StrategyOptions&) -> std::unique_ptr<WorkerRule> {
    WindowedWorker::Mode mode;
    mode.normalise = true;
    mode.fetch_at_push = true;
    return std::make_unique<WindowedWorker>(mode);
  };
  s.server_rule = [](const StrategyOptions& o, uint32_t) -> std::unique_ptr<ps::ServerRule> {
    const SyncRule::Combine combine = SyncRule::FromAggregation(o.settings.String("aggregation"));
    return std::make_unique<SyncRule>(Replicas(o), combine, "sagn");
  };
  return s;
}

}  // namespace asgd::algorithms
