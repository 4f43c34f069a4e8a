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
#include "core/check.h"
#include "core/error.h"

namespace asgd::algorithms {

Strategy EasgdStrategy() {
  Strategy s;
  s.name = "easgd";
  s.supports_compression = true;
  s.description = "synchronous elastic averaging: all workers exchange every W steps";
  s.keys = ReadKeys(kOptimizerKeys | kScheduleKeys, {"algorithm.window"});
  s.settings = {ElasticAlphaSetting()};
  s.synchronous = true;
  // With zero gradients all n workers' distances d = x_i − x̃ to the centre, when equal,
  // become d − αd − nαd = d·(1 − α(n + 1)) per exchange (each moves by α, the centre by
  // β = nα; docs/algorithms.md#easgd): the exchange contracts only for α(n + 1) < 2, past
  // which the workers and the centre swing apart ever further.
  s.check = [](const StrategyOptions& o) {
    const double alpha = ElasticAlpha(o);
    const double growth = alpha * (o.num_workers + 1);
    if (growth < 2) return;
    throw ConfigError(
        "algorithm.elastic_alpha", o.settings.Raw("elastic_alpha"),
        internal::StrCat("elastic_alpha·(algorithm.workers + 1) < 2 with easgd (the stability "
                         "condition of synchronous elastic averaging; here ",
                         alpha, "·(", o.num_workers, " + 1) = ", growth,
                         "): below ", 2.0 / (o.num_workers + 1), ", or 0 = 0.9/workers"));
  };
  s.worker_rule = [](const StrategyOptions& o) -> std::unique_ptr<WorkerRule> {
    ElasticWorker::Mode mode;
    mode.synchronous = true;
    mode.alpha = ElasticAlpha(o);
    return std::make_unique<ElasticWorker>(mode);
  };
  s.server_rule = [](const StrategyOptions& o, uint32_t) -> std::unique_ptr<ps::ServerRule> {
    return std::make_unique<SyncRule>(o.num_workers, SyncRule::Combine::kSumAdd, "easgd");
  };
  return s;
}

}  // namespace asgd::algorithms
