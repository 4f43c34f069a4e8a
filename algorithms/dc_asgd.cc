// dc_asgd — delay-compensated asynchronous SGD (Zheng, Meng, Wang, Chen, Yu, Ma, Liu,
// ICML 2017, arXiv 1609.08326; docs/algorithms.md#dc_asgd), the non-adaptive form (MXNet's
// DCASGD optimizer).
//
// Worker: pushes its raw gradient g (computed at the parameters it last received) and
// continues from the reply. Server: keeps, per worker m, the values w_bak(m) that worker
// last received (its pull or push-pull reply), and on a push applies
//   w ← w − η·(g + λ·g⊙g⊙(w − w_bak(m)))
// with η = algorithm.learning_rate decayed per epoch by algorithm.lr_decay on the server
// (the paper's step-decayed rate; the epoch is the shard's pushes × B / training
// examples, each push one batch) and λ = algorithm.dc_lambda (MXNet's default 0.04). Memory: one
// backup copy per worker on each shard (n + 1 copies of the shard's range).
// λ = 0 is async SGD; one worker (w = w_bak always) is SGD exactly, for any λ.
//
// Compression (compression.name, issue 17): meaningful: the push is one gradient; the server
// compensates the decoded gradient.
#include "algorithms/builtin_strategies.h"
#include "algorithms/finite_apply.h"
#include "algorithms/gradient_worker.h"
#include "algorithms/received_copies.h"

namespace asgd::algorithms {
namespace {

class DcRule final : public ps::ServerRule {
 public:
  DcRule(double lr, double lambda, double decay, double epochs_per_batch)
      : lr0_(lr), lambda_(static_cast<float>(lambda)), epochs_per_batch_(epochs_per_batch) {
    schedule_.decay = decay;
  }
  std::string Name() const override { return "dc_asgd"; }
  void OnPull(ps::ShardContext& ctx, ps::ServerCall& call) override {
    backup_.Remember(call.info().worker, ctx.values());
  }
  ps::PushOutcome OnPush(ps::ShardContext& ctx, ps::ServerCall& call) override {
    const float lr =
        static_cast<float>(lr0_ * LearningRateScale(schedule_, static_cast<double>(ctx.version()) *
                                                                   epochs_per_batch_));
    const std::span<const float> backup = backup_.Of(call.info().worker);
    const std::span<float> values = ctx.mutable_values();
    // All or nothing: g⊙g can overflow where g alone does not (finite_apply.h).
    ApplyFiniteOrRefuse(Name(), values, call.payload().pieces(), scratch_,
                        [&](std::size_t at, float g) {
                          // A worker that never pulled has no backup: no compensation
                          // (w − w_bak = 0).
                          const float drift = backup.empty() ? 0.0f : values[at] - backup[at];
                          return values[at] - lr * (g + lambda_ * g * g * drift);
                        });
    ctx.AdvanceVersion();
    return ps::PushOutcome::kApplied;
  }
  ps::PushOutcome OnPushPull(ps::ShardContext& ctx, ps::ServerCall& call) override {
    const ps::PushOutcome out = OnPush(ctx, call);
    backup_.Remember(call.info().worker, ctx.values());  // the reply carries these values
    return out;
  }
  // The backups w_bak survive a checkpoint (the values alone would lose the compensation).
  void Start(ps::ShardContext& ctx) override { size_ = static_cast<std::size_t>(ctx.size()); }
  std::string SaveState() const override { return backup_.Save(); }
  void LoadState(std::string_view state) override { backup_.Load(state, size_); }

 private:
  std::size_t size_ = 0;
  double lr0_;
  float lambda_;
  ScheduleOptions schedule_;
  double epochs_per_batch_;
  ReceivedCopies backup_;
  std::vector<float> scratch_;
};

}  // namespace

Strategy DcAsgdStrategy() {
  Strategy s;
  s.name = "dc_asgd";
  s.supports_compression = true;
  s.description = "delay-compensated async SGD: g + λ·g⊙g⊙(w − w_bak) applied at the server";
  s.keys = ReadKeys(kCommonKeys, {"algorithm.lr_decay"});
  s.settings = {
      DoubleSetting("dc_lambda", "0.04", 0, false, std::nullopt, false,
                    "λ of the delay compensation g + λ·g⊙g⊙(w − w_bak) (MXNet's default 0.04)")};
  s.worker_rule = [](const StrategyOptions&) -> std::unique_ptr<WorkerRule> {
    return std::make_unique<GradientWorker>();
  };
  s.server_rule = [](const StrategyOptions& o, uint32_t) -> std::unique_ptr<ps::ServerRule> {
    return std::make_unique<DcRule>(o.worker.learning_rate, o.settings.Double("dc_lambda"),
                                    o.schedule.decay, o.epochs_per_batch);
  };
  return s;
}

}  // namespace asgd::algorithms
