// async_sgd — asynchronous SGD over the parameter server (the PS form of Hogwild!,
// docs/algorithms.md#async_sgd): each worker pulls, computes a mini-batch gradient and pushes the
// local optimizer's update (−η·g for sgd); the server adds it on arrival without a
// global lock (each shard serialises its own requests; shards are independent).
//
// Source: Recht, Ré, Wright, Niu, "Hogwild!", NIPS 2011, mapped to a parameter server as
// MPIT's pserver.lua does ("no lock ... expect inconsistent read"). Convention: the push
// and the next pull are one atomic push-pull per shard, so the worker's next gradient is
// taken at the centre just after its own update. Staleness: PS updates between the pull
// and the push (docs/architecture.md#staleness); n − 1 under a round-robin schedule.
//
// Compression (compression.name, issue 17): meaningful: the push is one gradient (sent sparsified
// or quantized, the residual kept with error feedback).
#include "algorithms/builtin_strategies.h"
#include "algorithms/windowed_worker.h"

namespace asgd::algorithms {

Strategy AsyncSgdStrategy() {
  Strategy s;
  s.name = "async_sgd";
  s.supports_compression = true;
  s.description = "asynchronous SGD on the parameter server: push each update, add on arrival";
  s.keys = ReadKeys(kOptimizerKeys | kScheduleKeys);
  s.worker_rule = [](const StrategyOptions&) -> std::unique_ptr<WorkerRule> {
    WindowedWorker::Mode mode;
    mode.single_step = true;
    return std::make_unique<WindowedWorker>(mode);
  };
  s.server_rule = [](const StrategyOptions&, uint32_t) { return ps::NewAddRule(); };
  return s;
}

}  // namespace asgd::algorithms
