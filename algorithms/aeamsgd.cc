// aeamsgd — asynchronous elastic averaging with Nesterov momentum (Zhang et al. 2015,
// Alg. 2 "EAMSGD"; docs/algorithms.md#aeamsgd); the mechanics are in elastic.h. As aeasgd, with
// the local step v ← δv − η·g(x + δv); x ← x + v (δ = algorithm.momentum; the paper uses
// 0.99). The look-ahead is at x + δv: dist-keras's EAMSGDWorker evaluates at x − δv, a
// sign error that a test guards against. The local optimizer setting is not used. The
// exchange is aeasgd's, so α = 1 is refused as there (CheckAsynchronousElasticAlpha).
//
// Compression (compression.name, issue 17): refused: the push is the worker's parameters x (as
// aeasgd).
#include "algorithms/builtin_strategies.h"
#include "algorithms/elastic.h"

namespace asgd::algorithms {

Strategy AeamsgdStrategy() {
  Strategy s;
  s.name = "aeamsgd";
  s.description = "asynchronous elastic averaging with Nesterov momentum";
  s.keys = ReadKeys(kScheduleKeys, {"algorithm.window", "algorithm.momentum"});
  s.settings = {ElasticAlphaSetting()};
  s.check = [](const StrategyOptions& o) { CheckAsynchronousElasticAlpha(o, "aeamsgd"); };
  s.worker_rule = [](const StrategyOptions& o) -> std::unique_ptr<WorkerRule> {
    ElasticWorker::Mode mode;
    mode.nesterov = true;
    mode.momentum = o.worker_momentum;
    return std::make_unique<ElasticWorker>(mode);
  };
  s.server_rule = [](const StrategyOptions& o, uint32_t) {
    return NewElasticRule(ElasticAlpha(o));
  };
  return s;
}

}  // namespace asgd::algorithms
