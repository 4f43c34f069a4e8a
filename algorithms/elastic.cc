#include "algorithms/elastic.h"

#include "algorithms/finite_apply.h"
#include "core/check.h"
#include "core/error.h"

namespace asgd::algorithms {

using ps::Status;
namespace {

class ElasticRule final : public ps::ServerRule {
 public:
  explicit ElasticRule(double alpha) : alpha_(static_cast<float>(alpha)) {}
  std::string Name() const override { return "elastic"; }
  ps::PushOutcome OnPush(ps::ShardContext& ctx, ps::ServerCall& call) override {
    // A plain push (not an exchange) carries x as well; treat it the same way.
    return Exchange(ctx, call, nullptr);
  }
  ps::PushOutcome OnPushPull(ps::ShardContext& ctx, ps::ServerCall& call) override {
    ps::ReplyBuffer e(call.info().count);
    Exchange(ctx, call, &e);
    call.ReplyWith(std::move(e));
    return ps::PushOutcome::kApplied;
  }

 private:
  ps::PushOutcome Exchange(ps::ShardContext& ctx, ps::ServerCall& call, ps::ReplyBuffer* reply) {
    const std::span<float> values = ctx.mutable_values();
    const auto base = static_cast<std::size_t>(call.payload().offset());
    // All or nothing (finite_apply.h): x − centre can overflow. A refused exchange
    // leaves the reply unsent, so writing it while computing is harmless.
    ApplyFiniteOrRefuse(Name(), values, call.payload().pieces(), scratch_,
                        [&](std::size_t at, float x) {
                          const float e = alpha_ * (x - values[at]);
                          if (reply != nullptr) reply->values()[at - base] = e;
                          return values[at] + e;
                        });
    ctx.AdvanceVersion();
    return ps::PushOutcome::kApplied;
  }
  float alpha_;
  std::vector<float> scratch_;
};

}  // namespace

std::unique_ptr<ps::ServerRule> NewElasticRule(double alpha) {
  return std::make_unique<ElasticRule>(alpha);
}

Setting ElasticAlphaSetting() {
  return DoubleSetting("elastic_alpha", "0", 0, false, 1, false,
                       "the moving rate α = ηρ of the elastic exchange; 0 = the paper's "
                       "β/workers with β = 0.9 (Zhang et al. 2015); easgd refuses "
                       "α·(workers + 1) >= 2 and aeasgd, aeamsgd α = 1, where their "
                       "exchanges stop contracting");
}

double ElasticAlpha(const StrategyOptions& o) {
  const double alpha = o.settings.Double("elastic_alpha");
  return alpha > 0 ? alpha : 0.9 / o.num_workers;
}

// An asynchronous exchange moves the worker by −α(x − x̃) and the centre by +α(x − x̃), so
// their difference becomes (1 − 2α)(x − x̃) (Zhang et al. 2015, Alg. 1): it contracts only
// for 0 < α < 1. At α = 1 the factor is −1: the worker and the centre swap places at every
// exchange and never meet. (easgd's synchronous exchange has its own, tighter condition.)
void CheckAsynchronousElasticAlpha(const StrategyOptions& o, const char* strategy) {
  const double alpha = ElasticAlpha(o);
  if (alpha > 0 && alpha < 1) return;
  throw ConfigError("algorithm.elastic_alpha", o.settings.Raw("elastic_alpha"),
                    internal::StrCat("0 < elastic_alpha < 1 with ", strategy,
                                     " (an asynchronous exchange moves x − x̃ to (1 − 2α)(x − x̃); "
                                     "at α = 1 the worker and the centre swap), or 0 = "
                                     "0.9/workers"));
}

Status ElasticWorker::Start(WorkerEnv& env) {
  ASGD_CHECK(env.ps != nullptr && env.optimizer != nullptr && env.gradient, "incomplete env");
  const auto n = static_cast<std::size_t>(env.ps->size());
  x_.assign(n, 0.0f);
  grad_.assign(n, 0.0f);
  look_.assign(n, 0.0f);
  e_.assign(n, 0.0f);
  v_.assign(n, 0.0f);
  t_ = 0;
  Status st = env.ps->Pull(x_);
  centre_ = x_;
  return st;
}

StepResult ElasticWorker::Step(WorkerEnv& env) {
  StepResult r;
  const auto lr = static_cast<float>(env.options.learning_rate * env.learning_rate_scale);
  const auto delta = static_cast<float>(mode_.momentum);
  // The gradient at the pre-exchange point (plus the look-ahead for Nesterov).
  if (mode_.nesterov) {
    for (std::size_t i = 0; i < x_.size(); ++i) look_[i] = x_[i] + delta * v_[i];
    r.loss = env.gradient(look_, grad_);
  } else {
    r.loss = env.gradient(x_, grad_);
  }
  if (t_ % env.options.window == 0) {
    if (mode_.synchronous) {
      const auto alpha = static_cast<float>(mode_.alpha);
      for (std::size_t i = 0; i < x_.size(); ++i) e_[i] = alpha * (x_[i] - centre_[i]);
      for (std::size_t i = 0; i < x_.size(); ++i) x_[i] -= e_[i];
      r.status = env.ps->PushPull(e_, centre_, t_);  // returns with the new centre
    } else {
      r.status = env.ps->PushPull(x_, e_, t_);  // the server replies E
      if (r.status.ok()) {
        for (std::size_t i = 0; i < x_.size(); ++i) x_[i] -= e_[i];
      }
    }
    r.pushes = 1;
  }
  if (mode_.nesterov) {
    for (std::size_t i = 0; i < x_.size(); ++i) {
      v_[i] = delta * v_[i] - lr * grad_[i];
      x_[i] += v_[i];
    }
  } else {
    env.optimizer->Step(x_, grad_, lr);
  }
  ++t_;
  return r;
}

}  // namespace asgd::algorithms
