// aeasgd — asynchronous Elastic Averaging SGD (Zhang et al. 2015, Alg. 1;
// docs/algorithms.md#aeasgd); the mechanics are in elastic.h. Every W local steps (from
// t = 0) a worker sends
// x; the server computes E = α(x − x̃), x̃ ← x̃ + E atomically (the paper's master update,
// unlike dist-keras's separate pull and commit) and replies E; the worker applies
// x ← x − E, then its local step with the gradient taken before the exchange.
// α = algorithm.elastic_alpha, default 0.9/n. An exchange moves x − x̃ to (1 − 2α)(x − x̃):
// α = 1 would swap the worker and the centre at every exchange, and is refused
// (CheckAsynchronousElasticAlpha).
//
// Compression (compression.name, issue 17): refused: the push is the worker's parameters x, from
// which the server computes E; sparsifying or quantizing parameters would destroy them.
#include "algorithms/builtin_strategies.h"
#include "algorithms/elastic.h"

namespace asgd::algorithms {

Strategy AeasgdStrategy() {
  Strategy s;
  s.name = "aeasgd";
  s.description = "asynchronous elastic averaging: exchange with the centre every W steps";
  s.keys = ReadKeys(kOptimizerKeys | kScheduleKeys, {"algorithm.window"});
  s.settings = {ElasticAlphaSetting()};
  s.check = [](const StrategyOptions& o) { CheckAsynchronousElasticAlpha(o, "aeasgd"); };
  s.worker_rule = [](const StrategyOptions&) -> std::unique_ptr<WorkerRule> {
    return std::make_unique<ElasticWorker>(ElasticWorker::Mode{});
  };
  s.server_rule = [](const StrategyOptions& o, uint32_t) {
    return NewElasticRule(ElasticAlpha(o));
  };
  return s;
}

}  // namespace asgd::algorithms
