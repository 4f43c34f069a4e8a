// The worker and server sides of elastic averaging (Zhang, Choromanska, LeCun, "Deep
// learning with Elastic Averaging SGD", NIPS 2015; docs/algorithms.md#easgd to #aeamsgd), shared by
// easgd, aeasgd and aeamsgd.
//
// Workers keep their own parameters x (they are never reset to the centre x̃); every W
// local steps (t ≡ 0 mod W, t counted from 0, so the first exchange is at t = 0, a no-op
// since every worker starts at the centre) an exchange moves x and x̃ towards each other
// by the elastic difference E = α(x − x̃): x ← x − E, x̃ ← x̃ + E. Each exchange conserves
// x + x̃; only gradient steps change Σ x^i + x̃.
//
//   easgd (synchronous): the worker computes E from the centre it got at the previous
//     round and pushes E as a push-pull; the server (SyncRule, kSumAdd) adds the sum of
//     all n E's once every worker pushed and replies with the new centre. The paper's
//     x̃ ← x̃ + α Σ (x^i − x̃), with no 1/n.
//   aeasgd / aeamsgd (asynchronous, the paper's Alg. 1 and 2): the worker pushes x as a
//     push-pull; the server computes E = α(x − x̃) and x̃ ← x̃ + E atomically, and replies
//     E; the worker applies x ← x − E. One version per exchange.
//
// Local step, with the gradient always taken at the pre-exchange point (Alg. 1):
//   plain      x ← x_after_exchange − η·g(x_before)        (any local optimizer)
//   nesterov   v ← δv − η·g(x_before + δv);  x ← x_after_exchange + v   (aeamsgd, Alg. 2,
//              the look-ahead at x + δv: dist-keras's EAMSGDWorker looks at x − δv, a sign
//              error, docs/algorithms.md#aeamsgd); δ = algorithm.momentum; δ = 0 gives
//              aeasgd exactly.
#pragma once

#include <vector>

#include "algorithms/strategy.h"

namespace asgd::algorithms {

class ElasticWorker final : public WorkerRule {
 public:
  struct Mode {
    bool synchronous = false;  // easgd
    bool nesterov = false;     // aeamsgd
    double alpha = 0.1;        // easgd: the worker computes E itself
    double momentum = 0.0;     // δ for nesterov
  };
  explicit ElasticWorker(Mode mode) : mode_(mode) {}
  ps::Status Start(WorkerEnv& env) override;
  StepResult Step(WorkerEnv& env) override;
  std::span<const float> local_params() const override { return x_; }

 private:
  Mode mode_;
  std::vector<float> x_, centre_, grad_, look_, e_, v_;
  int64_t t_ = 0;
};

// aeasgd's server: on a push-pull of x, E = α(x − x̃); x̃ ← x̃ + E; reply E.
std::unique_ptr<ps::ServerRule> NewElasticRule(double alpha);

// algorithm.elastic_alpha, the moving rate α = ηρ of easgd, aeasgd and aeamsgd (declared by
// each); 0 = the paper's β/n with β = 0.9.
Setting ElasticAlphaSetting();
// α: elastic_alpha, or 0.9 / workers (Zhang et al. 2015, β = 0.9).
double ElasticAlpha(const StrategyOptions& o);
// The Strategy::check of the asynchronous exchange (aeasgd, aeamsgd; `strategy` names it in
// the message): throws ConfigError naming algorithm.elastic_alpha, its value and the stable
// range 0 < α < 1 unless ElasticAlpha(o) is in it.
void CheckAsynchronousElasticAlpha(const StrategyOptions& o, const char* strategy);

}  // namespace asgd::algorithms
