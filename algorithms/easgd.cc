// easgd — synchronous Elastic Averaging SGD (Zhang et al. 2015, docs/algorithms.md#easgd); the
// mechanics are in elastic.h. Every W local steps all n workers exchange: each pushes
// E = α(x − x̃) computed against the centre of the previous round and waits; the server
// adds Σ E once all n have pushed (x̃ ← x̃ + α Σ (x^i − x̃), no 1/n: the removed dist-keras
// server's 1/n breaks conservation) and every worker gets the new centre.
// α = algorithm.elastic_alpha, default β/n with β = 0.9 (the paper's experiments).
//
// Compression (compression.name, issue 17): meaningful: the push is the elastic difference E; the
// round sums the decoded E's (the worker keeps its own x - E, so with compression x + x̃ is no
// longer conserved exactly).
#include "algorithms/builtin_strategies.h"
#include "algorithms/elastic.h"
#include "algorithms/sync_rule.h"

namespace asgd::algorithms {

Strategy EasgdStrategy() {
  Strategy s;
  s.name = "easgd";
  s.supports_compression = true;
  s.description = "synchronous elastic averaging: all workers exchange every W steps";
  s.keys = ReadKeys(kOptimizerKeys | kScheduleKeys, {"algorithm.window"});
  s.settings = {ElasticAlphaSetting()};
  s.synchronous = true;
  s.worker_rule = [](const StrategyOptions& o) -> std::unique_ptr<WorkerRule> {
    ElasticWorker::Mode mode;
    mode.synchronous = true;
    mode.alpha = ElasticAlpha(o);
    return std::make_unique<ElasticWorker>(mode);
  };
  s.server_rule = [](const StrategyOptions& o, uint32_t) -> std::unique_ptr<transport::ServerRule> {
    return std::make_unique<SyncRule>(o.num_workers, SyncRule::Combine::kSumAdd, "easgd");
  };
  return s;
}

}  // namespace asgd::algorithms
